#include "io/safetensors_writer.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <numeric>
#include <thread>

#include "core/error.h"
#include "io/checkpoint.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Position of a dtype in the data section, as the reference library orders them (descending
// dtype in its enum): element sizes never grow, so with no gaps every tensor is aligned.
int layout_rank(DType t) {
  switch (t) {
    case DType::kI64:
      return 0;
    case DType::kF64:
      return 1;
    case DType::kF32:
      return 2;
    case DType::kI32:
      return 3;
    case DType::kBF16:
      return 4;
    case DType::kF16:
      return 5;
    case DType::kI16:
      return 6;
    case DType::kF8E8M0:
      return 7;
    case DType::kF8E4M3:
      return 8;
    case DType::kI8:
      return 9;
    case DType::kU8:
      return 10;
    case DType::kBool:
      return 11;
  }
  return 12;
}

// Tensors in data-section order: dtype rank, then name.
std::vector<const PendingTensor*> layout_order(const std::vector<PendingTensor>& tensors) {
  std::vector<const PendingTensor*> order;
  for (const auto& t : tensors) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](const PendingTensor* a, const PendingTensor* b) {
    const int ra = layout_rank(a->dtype), rb = layout_rank(b->dtype);
    return ra != rb ? ra < rb : a->name < b->name;
  });
  return order;
}

// The header bytes: u64 length, then the JSON (metadata first, tensors in data order, as the
// reference writes it) padded with spaces so the data starts 8-aligned.
std::string header_bytes(const std::vector<const PendingTensor*>& order,
                         const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json h = nlohmann::ordered_json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const PendingTensor* t : order) {
    const uint64_t end = offset + t->nbytes();
    h[t->name] = {{"dtype", dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text;
  try {
    text = h.dump();
  } catch (const json::exception& e) {
    fail("safetensors header: {}", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<char>((uint64_t{text.size()} >> (8 * i)) & 0xff);
  return out + text;
}

// A FILE* that is closed (and its temporary path removed unless committed) on scope exit.
class TempFile {
 public:
  explicit TempFile(fs::path target) : target_(std::move(target)), tmp_(target_.string() + ".tmp") {
    f_ = std::fopen(tmp_.c_str(), "wb");
    if (!f_) fail("{}: cannot create: {}", tmp_.string(), std::strerror(errno));
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (f_) std::fclose(f_);
    if (!committed_) std::remove(tmp_.c_str());
  }
  void write(const void* data, size_t n) {
    if (n && std::fwrite(data, 1, n, f_) != n) fail("{}: write failed: {}", tmp_.string(), std::strerror(errno));
  }
  void commit() {
    const int rc = std::fclose(f_);
    f_ = nullptr;
    if (rc != 0) fail("{}: write failed: {}", tmp_.string(), std::strerror(errno));
    if (std::rename(tmp_.c_str(), target_.c_str()) != 0)
      fail("{}: cannot rename into place: {}", target_.string(), std::strerror(errno));
    committed_ = true;
  }

 private:
  fs::path target_;
  fs::path tmp_;
  std::FILE* f_ = nullptr;
  bool committed_ = false;
};

void write_tensor(TempFile& out, const PendingTensor& t) {
  if (!t.fill) {
    out.write(t.bytes.data(), t.bytes.size());
    return;
  }
  std::vector<uint8_t> buf(t.nbytes());
  t.fill(buf);
  out.write(buf.data(), buf.size());
}

// Shards are written side by side: lazily drawn tensors (random checkpoints) fill on several cores while
// others write, and one file's writes stay in order. The first failure is rethrown once all have stopped.
void write_shards(const std::vector<SafetensorsWriter>& shards, const fs::path& dir,
                  const std::vector<std::string>& files) {
  const size_t threads = std::min<size_t>(shards.size(), std::max(2u, std::thread::hardware_concurrency() / 2));
  std::atomic<size_t> next{0};
  std::mutex mu;
  std::exception_ptr error;
  {
    std::vector<std::jthread> pool;
    for (size_t t = 0; t < threads; ++t) {
      pool.emplace_back([&] {
        for (size_t s; (s = next++) < shards.size();) {
          try {
            shards[s].write(dir / files[s]);
          } catch (...) {
            const std::lock_guard lock(mu);
            if (!error) error = std::current_exception();
          }
        }
      });
    }
  }
  if (error) std::rethrow_exception(error);
}

std::string shard_name(size_t k, size_t n) { return fmt::format("model-{:05d}-of-{:05d}.safetensors", k + 1, n); }

}  // namespace

uint64_t PendingTensor::nbytes() const {
  uint64_t n = dtype_size(dtype);
  for (int64_t d : shape) {
    if (d < 0) fail("tensor '{}': negative dim {}", name, d);
    if (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n)) fail("tensor '{}': shape too large", name);
  }
  return n;
}

void SafetensorsWriter::add_pending(PendingTensor t) {
  if (t.name.empty() || t.name == "__metadata__") fail("safetensors writer: invalid tensor name '{}'", t.name);
  const uint64_t n = t.nbytes();  // checks the shape
  if (!t.fill && t.bytes.size() != n)
    fail("tensor '{}': {} bytes given, shape needs {} bytes of {}", t.name, t.bytes.size(), n, dtype_name(t.dtype));
  if (!names_.insert(t.name).second) fail("safetensors writer: duplicate tensor '{}'", t.name);
  tensors_.push_back(std::move(t));
}

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  add_pending({std::move(name), dtype, std::move(shape), std::move(bytes), {}});
}

void SafetensorsWriter::add(std::string name, DType dtype, std::vector<int64_t> shape, std::span<const uint8_t> bytes) {
  add_pending({std::move(name), dtype, std::move(shape), {bytes.begin(), bytes.end()}, {}});
}

void SafetensorsWriter::add_lazy(std::string name, DType dtype, std::vector<int64_t> shape, TensorFill fill) {
  DSV4_CHECK(fill, "tensor '{}': empty fill function", name);
  add_pending({std::move(name), dtype, std::move(shape), {}, std::move(fill)});
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) {
  metadata_[std::move(key)] = std::move(value);
}

uint64_t SafetensorsWriter::data_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += t.nbytes();
  return n;
}

void SafetensorsWriter::write(const std::filesystem::path& path) const {
  const auto order = layout_order(tensors_);
  const std::string header = header_bytes(order, metadata_);
  TempFile out(path);
  out.write(header.data(), header.size());
  for (const PendingTensor* t : order) write_tensor(out, *t);
  out.commit();
}

// ---- ShardedCheckpointWriter ---------------------------------------------------------------------

ShardedCheckpointWriter::ShardedCheckpointWriter(uint64_t max_shard_bytes) : max_shard_bytes_(max_shard_bytes) {
  DSV4_CHECK(max_shard_bytes > 0, "sharded checkpoint writer: max shard size must be positive");
}

void ShardedCheckpointWriter::add(std::string name, DType dtype, std::vector<int64_t> shape,
                                  std::vector<uint8_t> bytes) {
  pending_.add(std::move(name), dtype, std::move(shape), std::move(bytes));
}

void ShardedCheckpointWriter::add_lazy(std::string name, DType dtype, std::vector<int64_t> shape, TensorFill fill) {
  pending_.add_lazy(std::move(name), dtype, std::move(shape), std::move(fill));
}

void ShardedCheckpointWriter::set_metadata(std::string key, std::string value) {
  pending_.set_metadata(std::move(key), std::move(value));
}

std::vector<std::string> ShardedCheckpointWriter::write(const std::filesystem::path& dir) {
  auto& tensors = pending_.tensors_;
  DSV4_CHECK(!tensors.empty(), "{}: no tensors to write", dir.string());
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) { return a.name < b.name; });
  std::vector<size_t> starts;  // first tensor of each shard
  uint64_t filled = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const uint64_t n = tensors[i].nbytes();
    if (starts.empty() || filled + n > max_shard_bytes_) {
      starts.push_back(i);
      filled = 0;
    }
    filled += n;
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("{}: cannot create folder: {}", dir.string(), ec.message());

  std::vector<std::string> files;
  json weight_map = json::object();
  const uint64_t total = pending_.data_bytes();
  starts.push_back(tensors.size());
  std::vector<SafetensorsWriter> shards(starts.size() - 1);
  for (size_t s = 0; s < shards.size(); ++s) {
    files.push_back(shard_name(s, shards.size()));
    shards[s].metadata_ = pending_.metadata_;
    for (size_t i = starts[s]; i < starts[s + 1]; ++i) {
      weight_map[tensors[i].name] = files.back();
      shards[s].add_pending(std::move(tensors[i]));
    }
  }
  pending_ = SafetensorsWriter{};
  write_shards(shards, dir, files);
  TempFile index(dir / kSafetensorsIndexName);
  const std::string text = json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}.dump(2) + "\n";
  index.write(text.data(), text.size());
  index.commit();
  return files;
}

}  // namespace dsv4
