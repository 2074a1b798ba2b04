// Safetensors files read lazily over mmap: only the header is parsed on open, tensor bytes are
// paged in by the kernel when first touched. Every byte range is validated against the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"

namespace dsv4 {

// One tensor of a safetensors header. begin/end are byte offsets into the data section.
struct TensorInfo {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;

  uint64_t nbytes() const { return end - begin; }
  int64_t numel() const;  // product of shape (1 for a scalar)
};

// A parsed header: tensors sorted by name, the data section's offset in the file (8 + N).
struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;
};

// Headers larger than this are rejected (as the reference library does).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Parses and validates the header of a safetensors file whose first bytes are `head` (all of
// the file, or at least its 8 + N header bytes) and whose total size is `file_size`. `file_name`
// is put in every error message. Throws dsv4::Error; never reads outside `head`.
SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> head, uint64_t file_size,
                                           std::string_view file_name);

// A read-only, memory-mapped safetensors file. Move-only; unmaps on destruction.
class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);  // throws dsv4::Error

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }  // sorted by name
  const TensorInfo* find(std::string_view name) const;                        // nullptr if absent
  const TensorInfo& get(std::string_view name) const;                         // throws naming the file and the tensor
  // The tensor's bytes inside the mapping; `t` must come from this file.
  std::span<const uint8_t> bytes(const TensorInfo& t) const;
  // Asks the kernel to start reading the tensor's pages (madvise WILLNEED); purely a hint.
  void prefetch(const TensorInfo& t) const;

  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const std::filesystem::path& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  uint64_t data_start() const { return header_.data_start; }

 private:
  SafetensorsFile() = default;
  void unmap() noexcept;

  std::filesystem::path path_;
  SafetensorsHeader header_;
  const uint8_t* base_ = nullptr;  // the whole file, PROT_READ / MAP_PRIVATE
  uint64_t size_ = 0;
};

}  // namespace dsv4
