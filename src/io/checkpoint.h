// A checkpoint: one safetensors file, or a folder of shards (through model.safetensors.index.json
// when present, else every *.safetensors in it). Opening parses headers only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "io/safetensors.h"

namespace dsv4 {

inline constexpr std::string_view kSafetensorsIndexName = "model.safetensors.index.json";

// A tensor found in a checkpoint with its bytes (memory-mapped).
struct TensorRef {
  const TensorInfo* info = nullptr;
  std::span<const uint8_t> data;
  const SafetensorsFile* file = nullptr;  // the shard holding it
};

class Checkpoint {
 public:
  // `dir_or_file`: a .safetensors file, a folder, or a folder's index file. With an index, every shard named in its
  // weight_map is opened, every mapped tensor must exist in its shard, and a tensor in a shard
  // that the map does not list is an error. Without one, all *.safetensors files of the folder
  // are shards. A tensor name in two shards is an error naming both. Throws dsv4::Error.
  static Checkpoint open(const std::filesystem::path& dir_or_file);

  const TensorInfo* find(std::string_view name) const;        // nullptr if absent
  TensorRef tensor(std::string_view name) const;              // throws naming the checkpoint and tensor
  std::span<const uint8_t> bytes(const TensorInfo& t) const;  // `t` must come from this checkpoint
  const SafetensorsFile& shard_of(const TensorInfo& t) const;
  bool contains(std::string_view name) const { return find(name) != nullptr; }

  std::vector<std::string> names() const;  // sorted
  size_t num_tensors() const { return entries_.size(); }
  uint64_t total_bytes() const;  // sum of all tensors' nbytes
  size_t num_shards() const { return shards_.size(); }
  const SafetensorsFile& shard(size_t i) const { return shards_.at(i); }
  const std::filesystem::path& path() const { return path_; }

 private:
  struct Entry {
    std::string_view name;  // points into the shard's TensorInfo
    const TensorInfo* info;
    uint32_t shard;
  };
  const Entry* lookup(std::string_view name) const;
  void index_tensors();

  std::filesystem::path path_;
  std::vector<SafetensorsFile> shards_;
  std::vector<Entry> entries_;  // sorted by name
};

}  // namespace dsv4
