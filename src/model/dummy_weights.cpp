#include "model/dummy_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "core/error.h"

namespace dsv4 {
namespace {

uint64_t page_size() { return static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE)); }
uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

}  // namespace

DummyWeights::DummyWeights(const ModelConfig& cfg, uint64_t seed)
    : gen_(cfg, seed), specs_(checkpoint_tensor_specs(cfg)), slots_(specs_.size()) {
  std::unordered_map<std::string, size_t> by_name;
  for (size_t i = 0; i < specs_.size(); ++i) {
    slots_[i].offset = reserved_;
    by_offset_.emplace(reserved_, i);
    by_name.emplace(specs_[i].name, i);
    reserved_ += round_up(specs_[i].nbytes(), page_size());
    total_ += specs_[i].nbytes();
  }
  for (size_t i = 0; i < specs_.size(); ++i) {
    if (!RandomTensors::is_quantized(specs_[i])) continue;
    const size_t s = by_name.at(RandomTensors::scale_name(specs_[i]));
    slots_[i].partner = static_cast<int64_t>(s);
    slots_[s].partner = static_cast<int64_t>(i);
  }
  // Address space only: pages are committed as tensors are made, and returned when they are released.
  void* p = mmap(nullptr, std::max<uint64_t>(reserved_, 1), PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  DSV4_CHECK(p != MAP_FAILED, "--load-format dummy: cannot reserve {} bytes of address space for the weights",
             reserved_);
  base_ = static_cast<uint8_t*>(p);
  weights_ = bind_weights(cfg, [&](const TensorSpec& s) { return base_ + slots_[by_name.at(s.name)].offset; });
  weights_.source = this;
}

DummyWeights::~DummyWeights() { munmap(base_, std::max<uint64_t>(reserved_, 1)); }

size_t DummyWeights::slot_of(const void* view) const {
  const auto* p = static_cast<const uint8_t*>(view);
  // The tensor holding the address: a rank's view of a sharded weight starts inside it.
  auto it = p >= base_ ? by_offset_.upper_bound(static_cast<uint64_t>(p - base_)) : by_offset_.begin();
  const bool inside = it != by_offset_.begin() &&
                      static_cast<uint64_t>(p - base_) < std::prev(it)->first + specs_[std::prev(it)->second].nbytes();
  DSV4_CHECK(inside, "--load-format dummy: {} is not inside a dummy tensor", view);
  return std::prev(it)->second;
}

void DummyWeights::mark_made(size_t i) {
  if (slots_[i].made) return;
  slots_[i].made = true;
  resident_ += specs_[i].nbytes();
  peak_ = std::max(peak_, resident_);
}

// A quantized weight and its scales come from one float matrix: they are made together. The scales
// are kept when the weight asked for them (the placement walk reads them next); made for their own
// sake, the scales leave the weight aside (whoever still needs it makes it), and a partner already made
// (in another rank's hands) is never written over.
void DummyWeights::make(size_t i) {
  const int64_t partner = slots_[i].partner;
  const TensorSpec& s = specs_[i];
  const auto bytes = [&](size_t k) { return std::span<uint8_t>(base_ + slots_[k].offset, specs_[k].nbytes()); };
  if (partner < 0) {
    gen_.fill(s, bytes(i));
    return mark_made(i);
  }
  const auto p = static_cast<size_t>(partner);
  const bool weight = RandomTensors::is_quantized(s);
  const bool keep_partner = weight && !slots_[p].made;
  std::vector<uint8_t> aside;
  const auto out = [&](size_t k) {
    if (k == i || keep_partner) return bytes(k);
    aside.resize(specs_[k].nbytes());
    return std::span<uint8_t>(aside);
  };
  const size_t w = weight ? i : p, sc = weight ? p : i;
  gen_.fill_quantized(specs_[w], out(w), out(sc));
  mark_made(i);
  if (keep_partner) mark_made(p);
}

void DummyWeights::acquire(const void* view) {
  std::lock_guard lock(mu_);
  const size_t i = slot_of(view);
  ++slots_[i].users;
  if (!slots_[i].made) make(i);
}

void DummyWeights::release(const void* view) {
  std::lock_guard lock(mu_);
  const size_t i = slot_of(view);
  if (slots_[i].users > 0 && --slots_[i].users > 0) return;
  if (!slots_[i].made) return;
  DSV4_CHECK(madvise(base_ + slots_[i].offset, round_up(specs_[i].nbytes(), page_size()), MADV_DONTNEED) == 0,
             "--load-format dummy: cannot release the host bytes of {}", specs_[i].name);
  slots_[i].made = false;
  resident_ -= specs_[i].nbytes();
}

}  // namespace dsv4
