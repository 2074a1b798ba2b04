#include "model/step_graphs.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace dsv4 {
namespace {

double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

struct StepGraphs::Entry {
  StepArena arena;
  std::unique_ptr<Device::Recording> recording;
  // What the recording baked in.
  uint64_t arena_generation = 0, scratch_epoch = 0, logits_generation = 0;
  std::vector<const void*> tables;
  bool warm = false;    // one step of this shape ran eagerly (with its arena's current layout)
  bool failed = false;  // recording or replay failed: eager from now on
  uint64_t last_used = 0;
};

StepGraphs::StepGraphs(Device& dev, Ops& ops, const ModelConfig& cfg, size_t max_shapes)
    : dev_(dev), ops_(ops), cfg_(cfg), max_shapes_(std::max<size_t>(max_shapes, 1)) {}

StepGraphs::~StepGraphs() = default;

StepGraphs::Entry& StepGraphs::entry(const StepShape& shape) {
  auto it = entries_.find(shape);
  if (it == entries_.end()) {
    evict();
    it = entries_.emplace(shape, std::make_unique<Entry>()).first;
  }
  it->second->last_used = ++tick_;
  return *it->second;
}

void StepGraphs::evict() {
  while (entries_.size() >= max_shapes_) {
    auto oldest = std::min_element(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
      return a.second->last_used < b.second->last_used;
    });
    if (oldest->second->recording) ++stats_.dropped;
    entries_.erase(oldest);
  }
}

float* StepGraphs::logits(int64_t rows) {
  const size_t need = static_cast<size_t>(std::max<int64_t>(rows, 1) * cfg_.vocab_size);
  if (logits_.size() < need) {
    logits_ = DeviceArray<float>(dev_, std::max(need, static_cast<size_t>(8 * cfg_.vocab_size)));
    ++logits_generation_;
  }
  return logits_.data();
}

// The KV tables and page maps a step's work addresses (a recording bakes their bases and sizes in).
std::vector<const void*> StepGraphs::tables(const KvAccess& kv) const {
  std::vector<const void*> t;
  auto add = [&](int l, KvKind k) {
    const EntryTable e = kv.table(l, k);
    t.push_back(e.base);
    t.push_back(reinterpret_cast<const void*>(static_cast<uintptr_t>(e.capacity)));
    t.push_back(kv.page_map(l, k).pages);
  };
  for (int l = 0; l < cfg_.n_layers; ++l) {
    add(l, KvKind::kWindow);
    const int ratio = cfg_.compress_ratio(l);
    if (ratio == 0) continue;
    add(l, KvKind::kCompressorState);
    add(l, KvKind::kCompressed);
    if (ratio != 4) continue;
    add(l, KvKind::kIndexerState);
    add(l, KvKind::kIndexerKey);
  }
  return t;
}

const float* StepGraphs::run(const StepShape& shape, const ForwardBatch& padded, KvAccess& kv, bool record,
                             const Body& body) {
  DSV4_CHECK(static_cast<int64_t>(padded.seqs.size()) == shape.batch, "step graphs: a batch of {} for shape {}",
             padded.seqs.size(), shape.batch);
  Entry& e = entry(shape);
  float* out = logits(shape.batch);
  const auto t0 = std::chrono::steady_clock::now();
  StepIndex index(dev_, cfg_, padded, kv, StepLayout{true, &e.arena});
  stats_.index_ms = ms_since(t0);
  stats_.sync_ms = index.sync_ms;
  stats_.upload_ms = index.upload_ms;
  stats_.upload_bytes = index.upload_bytes;
  stats_.launch_ms = 0;
  auto eager = [&] {
    body(index, out);
    index.release_expanded();
    ++stats_.eager;
  };
  if (!record || e.failed || !dev_.can_record()) {
    eager();
    return out;
  }
  std::vector<const void*> now = tables(kv);
  if (e.recording && (e.arena_generation != e.arena.generation() || e.scratch_epoch != ops_.scratch_epoch() ||
                      e.logits_generation != logits_generation_ || e.tables != now)) {
    e.recording.reset();
    ++stats_.dropped;
  }
  if (e.arena_generation != e.arena.generation()) e.warm = false;  // a new layout warms up again
  if (!e.recording && !e.warm) {
    eager();
    e.warm = true;
    e.arena_generation = e.arena.generation();
    return out;
  }
  try {
    const bool fresh = !e.recording;
    if (fresh) {
      dev_.begin_recording();
      body(index, out);
      index.release_expanded();
      e.recording = dev_.end_recording();
      e.arena_generation = e.arena.generation();
      e.scratch_epoch = ops_.scratch_epoch();
      e.logits_generation = logits_generation_;
      e.tables = std::move(now);
      ++stats_.recorded;
    }
    const auto t1 = std::chrono::steady_clock::now();
    dev_.replay(*e.recording);
    stats_.launch_ms = ms_since(t1);
    if (!fresh) ++stats_.replayed;
  } catch (const std::exception& ex) {
    dev_.abort_recording();
    index.release_expanded();
    e.recording.reset();
    e.failed = true;
    ++stats_.failed;
    if (!warned_) spdlog::warn("step graphs: batch {} runs eagerly from now on: {}", shape.batch, ex.what());
    warned_ = true;
    eager();
  }
  return out;
}

}  // namespace dsv4
