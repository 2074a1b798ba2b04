#include "backend/cuda/gemm/mma_layout.h"

#include <gtest/gtest.h>

#include <set>

namespace dsv4::cuda {
namespace {

// The A fragment as the hardware lays it out (mma.sync m16n8k16, and wgmma's register A a warp): lane t of
// a row quad holds columns 2t, 2t + 1 in its first register pair and 2t + 8, 2t + 9 in its second. The
// kernel puts block t's elements 4s, 4s + 1 in the first and 4s + 2, 4s + 3 in the second in k step s, so
// q's B tile must hold those dims at those columns; and it is a permutation of the 128 dims.
TEST(MmaLayout, IndexerQTileHoldsTheDimOfEveryASlot) {
  std::set<int> positions;
  for (int dim = 0; dim < 128; ++dim) positions.insert(indexer_b_position(dim));
  EXPECT_EQ(positions.size(), 128u);
  EXPECT_EQ(*positions.rbegin(), 127);
  for (int t = 0; t < 4; ++t) {
    for (int s = 0; s < 8; ++s) {
      for (int e = 0; e < 2; ++e) {
        EXPECT_EQ(indexer_b_position(32 * t + 4 * s + e), 16 * s + 2 * t + e) << "thread " << t << " step " << s;
        EXPECT_EQ(indexer_b_position(32 * t + 4 * s + 2 + e), 16 * s + 2 * t + 8 + e)
            << "thread " << t << " step " << s;
      }
    }
  }
}

// The swizzle keeps 16-byte units whole, maps each 8-row group onto itself, and gives the 8 rows of a
// column of units 8 distinct units (the bank spread ldmatrix and wgmma rely on).
TEST(MmaLayout, Sw128IsAPermutationOfUnitsWithinEachGroup) {
  std::set<int> offsets;
  for (int row = 0; row < 16; ++row) {
    for (int byte = 0; byte < 128; ++byte) {
      const int o = sw128_offset(row, byte);
      offsets.insert(o);
      EXPECT_EQ(o / 1024, row / 8);
      EXPECT_EQ(o % 16, byte % 16);
    }
  }
  EXPECT_EQ(offsets.size(), 16u * 128u);
  for (int unit = 0; unit < 8; ++unit) {
    std::set<int> units;
    for (int row = 0; row < 8; ++row) units.insert(sw128_offset(row, 16 * unit) % 128 / 16);
    EXPECT_EQ(units.size(), 8u) << unit;
  }
}

}  // namespace
}  // namespace dsv4::cuda
