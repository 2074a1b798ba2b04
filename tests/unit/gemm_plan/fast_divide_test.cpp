#include "backend/cuda/gemm/fast_divide.h"

#include <gtest/gtest.h>

#include <random>

namespace dsv4::cuda {
namespace {

// Every divisor a paged table may have per page (and powers of two far past it), against n / d at the
// edges of each quotient and at random n, up to 2^32 - 1.
TEST(FastDivide, EqualsIntegerDivisionForEvery32BitNumerator) {
  std::mt19937 rng(7);
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 5000; ++d) divisors.push_back(d);
  for (int s = 13; s < 31; ++s) divisors.insert(divisors.end(), {(1u << s) - 1, 1u << s, (1u << s) + 1});
  for (const uint32_t d : divisors) {
    const FastDivide div(d);
    for (const uint32_t q : {0u, 1u, 2u, 3u, 1000u, 0xffffffffu / d}) {
      for (const int64_t off : {int64_t{-1}, int64_t{0}, int64_t{1}, static_cast<int64_t>(d) - 1}) {
        const int64_t n = static_cast<int64_t>(q) * d + off;
        if (n < 0 || n > 0xffffffffLL) continue;
        ASSERT_EQ(div(static_cast<uint32_t>(n)), static_cast<uint32_t>(n) / d) << n << " / " << d;
      }
    }
    for (int i = 0; i < 200; ++i) {
      const uint32_t n = static_cast<uint32_t>(rng());
      ASSERT_EQ(div(n), n / d) << n << " / " << d;
    }
  }
}

}  // namespace
}  // namespace dsv4::cuda
