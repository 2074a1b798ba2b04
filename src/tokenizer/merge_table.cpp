#include "tokenizer/merge_table.h"

#include <algorithm>
#include <bit>

namespace dsv4 {

MergeTable::MergeTable(size_t expected) {
  const size_t capacity = std::bit_ceil(std::max<size_t>(16, expected * 2));
  slots_.assign(capacity, Slot{});
  mask_ = capacity - 1;
  shift_ = 64 - std::countr_zero(capacity);
}

void MergeTable::insert(int32_t left, int32_t right, Merge merge) {
  if ((size_ + 1) * 2 > slots_.size()) grow();
  const uint64_t key = pack(left, right);
  for (size_t i = slot(key);; i = (i + 1) & mask_) {
    Slot& s = slots_[i];
    if (s.key == key) {
      s.merge = merge;
      return;
    }
    if (s.key == kEmpty) {
      s = Slot{key, merge};
      ++size_;
      return;
    }
  }
}

void MergeTable::grow() {
  std::vector<Slot> old = std::move(slots_);
  *this = MergeTable(old.size());
  for (const Slot& s : old)
    if (s.key != kEmpty) insert(static_cast<int32_t>(s.key >> 32), static_cast<int32_t>(s.key & 0xFFFFFFFFu), s.merge);
}

}  // namespace dsv4
