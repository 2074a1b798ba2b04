// Writes safetensors files and sharded checkpoints deterministically: the same content gives
// byte-identical files. The layout is the reference library's (data sorted by dtype, widest
// first, then by name, no gaps; header JSON in data order, padded with spaces to 8 bytes), so
// every tensor is aligned to its element size and the reference reader accepts the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace dsv4 {

// Fills a tensor's bytes (out.size() == nbytes) at write time, so that large checkpoints are
// streamed to disk one tensor at a time instead of held in memory.
using TensorFill = std::function<void(std::span<uint8_t> out)>;

// One tensor to be written: its bytes are either owned or produced by a TensorFill.
struct PendingTensor {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;  // used when fill is empty
  TensorFill fill;

  uint64_t nbytes() const;  // product(shape) * dtype_size
};

class SafetensorsWriter {
 public:
  // Takes the bytes; their size must equal product(shape) * dtype_size. Throws dsv4::Error on a
  // duplicate or empty name, a negative dim or a size mismatch.
  void add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  void add(std::string name, DType dtype, std::vector<int64_t> shape, std::span<const uint8_t> bytes);
  // The bytes are produced by `fill` during write().
  void add_lazy(std::string name, DType dtype, std::vector<int64_t> shape, TensorFill fill);
  void set_metadata(std::string key, std::string value);

  size_t size() const { return tensors_.size(); }
  uint64_t data_bytes() const;  // sum of the tensors' nbytes

  // Writes to `path` (through a temporary file renamed into place). Throws dsv4::Error.
  void write(const std::filesystem::path& path) const;

 private:
  friend class ShardedCheckpointWriter;
  void add_pending(PendingTensor t);

  std::vector<PendingTensor> tensors_;
  std::set<std::string, std::less<>> names_;
  std::map<std::string, std::string> metadata_;
};

// Writes a sharded checkpoint into a folder: model-0000k-of-0000n.safetensors files of at most
// `max_shard_bytes` of tensor data each (a larger tensor gets a shard of its own), tensors
// assigned in name order, plus model.safetensors.index.json
// {"metadata":{"total_size":N},"weight_map":{name:file}}. Shards are written one at a time.
class ShardedCheckpointWriter {
 public:
  explicit ShardedCheckpointWriter(uint64_t max_shard_bytes);

  void add(std::string name, DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> bytes);
  void add_lazy(std::string name, DType dtype, std::vector<int64_t> shape, TensorFill fill);
  void set_metadata(std::string key, std::string value);  // copied into every shard's header

  // Creates `dir` if needed and writes the shards and the index; returns the shard file names.
  // Owned bytes are released as their shard is written.
  std::vector<std::string> write(const std::filesystem::path& dir);

 private:
  uint64_t max_shard_bytes_;
  SafetensorsWriter pending_;  // checks the tensors; they are moved out into the shards
};

}  // namespace dsv4
