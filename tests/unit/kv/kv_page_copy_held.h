// A page copier that runs offloads at once and holds restores back until told (tests): the background
// copies of a GPU's copy queue, landing only when land() is called.
#pragma once

#include <cstring>
#include <span>
#include <vector>

#include "kv/kv_page_copy.h"

namespace dsv4::kvtest {

class HeldRestores final : public KvPageCopier {
 public:
  uint64_t copy(std::span<const KvPageCopy> batch) override {
    bool restores = false;
    for (const KvPageCopy& c : batch) {
      if (c.to_device) {
        held_.push_back(c);
        restores = true;
      } else {
        std::memcpy(c.dst, c.src, static_cast<size_t>(c.bytes));
      }
    }
    return restores ? ++issued_ : 0;
  }
  bool landed(uint64_t ticket) override { return ticket <= landed_; }
  // Every held restore lands, in order.
  void land() {
    for (const KvPageCopy& c : held_) std::memcpy(c.dst, c.src, static_cast<size_t>(c.bytes));
    held_.clear();
    landed_ = issued_;
  }
  size_t held() const { return held_.size(); }

 private:
  std::vector<KvPageCopy> held_;
  uint64_t issued_ = 0, landed_ = 0;
};

// Lands every held restore when it goes out of scope: declared after the cache manager, it lets the
// manager's destructor (which waits for copies in flight) finish after a failed assertion.
struct LandAtExit {
  HeldRestores& copier;
  ~LandAtExit() { copier.land(); }
};

}  // namespace dsv4::kvtest
