// n / d for a divisor fixed at launch as a multiply-high, an add and a shift: on the GPU a 32-bit integer
// division is a dozen instructions and a 64-bit one a call, in loops that divide once an item (a slot's
// page in a paged table). For d >= 1 and any 32-bit n: with l = ceil(log2 d) and m = floor(2^32 (2^l - d)
// / d) + 1, n / d = (umulhi(n, m) + n) >> l, the sum taken in 64 bits.
#pragma once

#include <cstdint>

#include "core/host_device.h"

namespace dsv4::cuda {

struct FastDivide {
  uint32_t magic = 1;  // d = 1
  int shift = 0;

  FastDivide() = default;
  DSV4_HOST_DEVICE explicit FastDivide(uint32_t d) {
    while ((uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d) / d + 1);
  }
  DSV4_HOST_DEVICE uint32_t operator()(uint32_t n) const {
    return static_cast<uint32_t>(((uint64_t{n} * magic >> 32) + n) >> shift);
  }
};

}  // namespace dsv4::cuda
