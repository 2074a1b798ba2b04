// BPE merge ranks: (left id, right id) -> (rank, merged id), in an open-addressing table that a lookup
// walks without allocating (the merge loop's hot path).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

namespace dsv4 {

struct Merge {
  uint32_t rank;
  int32_t merged;
};

class MergeTable {
 public:
  explicit MergeTable(size_t expected = 0);

  // A later insert of the same pair replaces the earlier one (as HF's merge map does).
  void insert(int32_t left, int32_t right, Merge merge);
  std::optional<Merge> find(int32_t left, int32_t right) const {
    const uint64_t key = pack(left, right);
    for (size_t i = slot(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.key == key) return s.merge;
      if (s.key == kEmpty) return std::nullopt;
    }
  }
  size_t size() const { return size_; }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key = kEmpty;
    Merge merge{};
  };
  static uint64_t pack(int32_t left, int32_t right) {
    return (uint64_t{static_cast<uint32_t>(left)} << 32) | static_cast<uint32_t>(right);
  }
  size_t slot(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_; }
  void grow();

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

}  // namespace dsv4
