// The GEMM plan (backend/cuda/gemm/gemm_plan.h): pure host decisions, checked without a GPU.
#include "backend/cuda/gemm/gemm_plan.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "core/env.h"
#include "core/error.h"

namespace dsv4::cuda {
namespace {

constexpr DeviceCaps kH200{132};

GemmPolicy policy(Numerics n) {
  GemmPolicy p;
  p.numerics = n;
  return p;
}

GemmProblem dense(GemmWeightKind w, int64_t rows, int64_t n, int64_t k) {
  GemmProblem p;
  p.weight = w;
  p.rows = rows;
  p.n = n;
  p.kg = k;
  return p;
}

GemmProblem grouped(GemmWeightKind w, int64_t rows, int experts, int64_t n, int64_t k) {
  GemmProblem p = dense(w, rows, n, k);
  p.experts = experts;
  p.pair = true;
  return p;
}

// A step of `tokens` tokens with top-6 routing and V4-Flash's widest block-scaled weights.
GemmWorkspaceQuery moe_step(int64_t tokens) {
  GemmWorkspaceQuery q;
  q.rows = tokens;
  q.routed_rows = tokens * 6;
  q.max_k = 4096;
  q.max_n = 4096;
  return q;
}

TEST(GemmPlan, ExactTierKeepsEveryCallOnTheExactKernels) {
  for (auto w : {GemmWeightKind::kFp8, GemmWeightKind::kFp4}) {
    const GemmPlan plan = plan_gemm(dense(w, 4096, 4096, 4096), policy(Numerics::kExact), kH200);
    EXPECT_EQ(plan.route, GemmRoute::kExactBlock);
    EXPECT_EQ(plan.workspace_floats, 0);
  }
  for (auto w : {GemmWeightKind::kBf16, GemmWeightKind::kF32}) {
    EXPECT_EQ(plan_gemm(dense(w, 32, 4096, 4096), policy(Numerics::kExact), kH200).route, GemmRoute::kExactPlain);
  }
}

TEST(GemmPlan, ACallThatAsksExactStaysExactOnTheFastTier) {
  GemmProblem p = dense(GemmWeightKind::kFp8, 1, 32768, 1024);
  p.exact = true;
  EXPECT_EQ(plan_gemm(p, policy(Numerics::kFast), kH200).route, GemmRoute::kExactBlock);
}

TEST(GemmPlan, FastDenseFp8OfManyRowsGoesToCublasLtWithTheWgmmaKernelBehind) {
  for (int64_t rows : {65, 256, 8192}) {
    const GemmPlan plan = plan_gemm(dense(GemmWeightKind::kFp8, rows, 32768, 1024), policy(Numerics::kFast), kH200);
    EXPECT_EQ(plan.route, GemmRoute::kCublasLt) << rows;
    EXPECT_EQ(plan.fallback, GemmRoute::kWgmma) << rows;
    EXPECT_TRUE(plan.codes);
    EXPECT_EQ(plan.splits, 1);
    EXPECT_EQ(plan.workspace_floats, 0);
  }
  GemmPolicy no_lt = policy(Numerics::kFast);
  no_lt.cublaslt = false;
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kFp8, 8192, 4096, 4096), no_lt, kH200).route, GemmRoute::kWgmma);
  GemmPolicy neither = no_lt;  // the mma.sync kernel's rows raised past the call's
  neither.fast_mma_max_rows = 1 << 20;
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kFp8, 8192, 4096, 4096), neither, kH200).route, GemmRoute::kFastMma);
}

TEST(GemmPlan, FastManyRowsAWeightGoToWgmma) {
  const GemmPolicy fast = policy(Numerics::kFast);
  // Dense FP4 above the mma.sync kernel's rows; at or below them it keeps them.
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kFp4, 65, 4096, 2048), fast, kH200).route, GemmRoute::kWgmma);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kFp4, 64, 4096, 2048), fast, kH200).route, GemmRoute::kFastMma);
  // Grouped: by the average rows a weight, against wgmma_min_rows.
  EXPECT_EQ(plan_gemm(grouped(GemmWeightKind::kFp4, 64 * 32, 32, 2048, 4096), fast, kH200).route, GemmRoute::kWgmma);
  EXPECT_EQ(plan_gemm(grouped(GemmWeightKind::kFp4, 64 * 32 - 1, 32, 2048, 4096), fast, kH200).route,
            GemmRoute::kFastMma);
  GemmPolicy low = fast;
  low.wgmma_min_rows = 8;
  EXPECT_EQ(plan_gemm(grouped(GemmWeightKind::kFp8, 256, 32, 2048, 4096), low, kH200).route, GemmRoute::kWgmma);
  // Grouped columns stay on the mma.sync kernel.
  GemmProblem g = dense(GemmWeightKind::kFp4, 4096, 1024, 1024);
  g.groups = 8;
  EXPECT_EQ(plan_gemm(g, fast, kH200).route, GemmRoute::kFastMma);
}

// FP4 wgmma calls with the weights widened beforehand (calls of at least prewiden_min_rows rows an
// expert): as many experts a pass as the budget holds (at least one, at most all), the scratch counted
// in the plan and in the runner's workspace; fewer rows an expert widen in shared memory.
TEST(GemmPlan, WidenedFp4PassesStayWithinTheBudget) {
  GemmPolicy on = policy(Numerics::kFast);
  on.lt_experts_min_rows = 0;  // the wgmma route alone (cuBLASLt an expert: the next test)
  GemmPolicy off = on;
  off.fp4_prewiden = false;
  const GemmProblem moe = grouped(GemmWeightKind::kFp4, 8192 * 6, 32, 2048, 4096);  // w1 and w3 of 32 experts
  EXPECT_EQ(plan_gemm(moe, off, kH200).widen_experts, 0);
  EXPECT_EQ(plan_gemm(grouped(GemmWeightKind::kFp4, 8192 * 6, 256, 2048, 4096), on, kH200).widen_experts, 0);
  EXPECT_GT(plan_gemm(grouped(GemmWeightKind::kFp4, 1024 * 256, 256, 2048, 4096), on, kH200).widen_experts, 0);
  EXPECT_EQ(plan_gemm(grouped(GemmWeightKind::kFp4, 1023 * 256, 256, 2048, 4096), on, kH200).widen_experts, 0);
  const GemmPlan plan = plan_gemm(moe, on, kH200);
  EXPECT_EQ(plan.route, GemmRoute::kWgmma);
  const int64_t per = 2 * 2048 * (4096 + 4096 / 128 * 4);  // the pair's e5m2 codes and row-block scales
  EXPECT_EQ(plan.widen_experts, kWidenBudgetBytes / per);
  EXPECT_LE(widened_bytes(2 * plan.widen_experts, 2048, 4096), kWidenBudgetBytes);
  GemmProblem few = moe;
  few.experts = 4;
  few.rows = 4 * 1024;
  EXPECT_EQ(plan_gemm(few, on, kH200).widen_experts, 4);               // all of them in one pass
  GemmProblem huge = dense(GemmWeightKind::kFp4, 4096, 65536, 16384);  // past the budget alone: one a pass
  EXPECT_EQ(plan_gemm(huge, on, kH200).widen_experts, 1);
  // FP8 weights and calls off the wgmma route widen nothing.
  EXPECT_EQ(plan_gemm(grouped(GemmWeightKind::kFp8, 8192 * 6, 32, 2048, 4096), on, kH200).widen_experts, 0);
  EXPECT_EQ(plan_gemm(grouped(GemmWeightKind::kFp4, 6, 32, 2048, 4096), on, kH200).widen_experts, 0);
  GemmWorkspaceQuery q = moe_step(8192);
  EXPECT_GE(gemm_workspace_bytes(q, on, kH200) - gemm_workspace_bytes(q, off, kH200), kWidenBudgetBytes);
  q.rows = 64, q.routed_rows = 64 * 6;  // a decode step's: no call widens, nothing reserved
  EXPECT_EQ(gemm_workspace_bytes(q, on, kH200), gemm_workspace_bytes(q, off, kH200));
}

// FP4 experts of at least lt_experts_min_rows rows on average: a cuBLASLt matmul an expert on weights
// re-encoded in passes within the widening budget, the wgmma plan behind it; fewer rows an expert, FP8
// experts, N off the 128-row scale blocks, cuBLASLt off or the route off stay on wgmma. The budget is
// reserved in the workspace from the route's rows.
TEST(GemmPlan, Fp4ExpertsOfManyRowsRunOnCublasLtOneByOne) {
  const GemmPolicy fast = policy(Numerics::kFast);
  EXPECT_EQ(fast.lt_experts_min_rows, 224);
  const GemmProblem moe = grouped(GemmWeightKind::kFp4, 8192 * 6, 32, 2048, 4096);  // 1536 rows an expert
  const GemmPlan plan = plan_gemm(moe, fast, kH200);
  EXPECT_EQ(plan.route, GemmRoute::kCublasLtExperts);
  EXPECT_EQ(plan.fallback, GemmRoute::kWgmma);
  EXPECT_TRUE(plan.codes);
  const int64_t per = 2 * 2048 * (4096 + 4096 / 128 * 4);
  EXPECT_EQ(plan.lt_pass_experts, kWidenBudgetBytes / per);  // 15 of the 32 experts' pairs a pass
  EXPECT_EQ(plan.widen_experts, kWidenBudgetBytes / per);    // the wgmma fallback's own passes
  EXPECT_STREQ(route_name(plan.route), "cublaslt-experts");
  GemmProblem few = moe;
  few.experts = 4, few.rows = 4 * 1100;
  EXPECT_EQ(plan_gemm(few, fast, kH200).lt_pass_experts, 4);  // every expert in one pass
  EXPECT_EQ(plan_gemm(few, fast, kH200).widen_experts, 4);    // the wgmma fallback's passes too
  EXPECT_EQ(plan_gemm(grouped(GemmWeightKind::kFp4, 223 * 32, 32, 2048, 4096), fast, kH200).route, GemmRoute::kWgmma);
  EXPECT_EQ(plan_gemm(grouped(GemmWeightKind::kFp4, 224 * 32, 32, 2048, 4096), fast, kH200).route,
            GemmRoute::kCublasLtExperts);
  // Experts kept re-encoded (nothing to re-encode in the call): from lt_kept_min_rows (64), within wgmma's
  // rows; a prompt chunk of 512 tokens is 96 rows an expert.
  EXPECT_EQ(fast.lt_kept_min_rows, 64);
  GemmProblem kept = grouped(GemmWeightKind::kFp4, 96 * 32, 32, 2048, 4096);
  EXPECT_EQ(plan_gemm(kept, fast, kH200).route, GemmRoute::kWgmma);
  kept.kept = true;
  EXPECT_EQ(plan_gemm(kept, fast, kH200).route, GemmRoute::kCublasLtExperts);
  kept.rows = 64 * 32;
  EXPECT_EQ(plan_gemm(kept, fast, kH200).route, GemmRoute::kCublasLtExperts);
  kept.rows = 63 * 32;  // below wgmma's rows: the mma.sync plan
  EXPECT_EQ(plan_gemm(kept, fast, kH200).route, GemmRoute::kFastMma);
  GemmPolicy kept_off = fast;
  kept_off.lt_experts_min_rows = 0;  // the route off is off for kept experts too
  kept.rows = 96 * 32;
  EXPECT_EQ(plan_gemm(kept, kept_off, kH200).route, GemmRoute::kWgmma);
  EXPECT_EQ(plan_gemm(grouped(GemmWeightKind::kFp8, 8192 * 6, 32, 2048, 4096), fast, kH200).route, GemmRoute::kWgmma);
  EXPECT_EQ(plan_gemm(grouped(GemmWeightKind::kFp4, 8192 * 6, 32, 2000, 4096), fast, kH200).route, GemmRoute::kWgmma);
  GemmPolicy no_lt = fast;
  no_lt.cublaslt = false;
  EXPECT_EQ(plan_gemm(moe, no_lt, kH200).route, GemmRoute::kWgmma);
  GemmPolicy off = fast;
  off.lt_experts_min_rows = 0;
  EXPECT_EQ(plan_gemm(moe, off, kH200).route, GemmRoute::kWgmma);
  EXPECT_EQ(plan_gemm(moe, off, kH200).lt_pass_experts, 0);
  // Routed rows that reach the route's threshold (here 256) but not prewiden's 1024: the budget is reserved
  // (the workspace asks per step, not per expert: at least that many rows in one expert).
  GemmPolicy low = fast;
  low.lt_experts_min_rows = 256;
  const GemmWorkspaceQuery q = moe_step(50);
  EXPECT_GE(gemm_workspace_bytes(q, low, kH200) - gemm_workspace_bytes(q, off, kH200), kWidenBudgetBytes);
  // The route's matmuls on lt_expert_streams streams (four by default): a cuBLASLt workspace for each
  // beyond the first.
  EXPECT_EQ(low.lt_expert_streams, 4);
  GemmPolicy one = low;
  one.lt_expert_streams = 1;
  EXPECT_EQ(gemm_workspace_bytes(q, low, kH200) - gemm_workspace_bytes(q, one, kH200), 3 * kCublasLtWorkspaceBytes);
  // Two buffers of the budget: each pass re-encoded while the one before it multiplies. A smaller budget,
  // more passes.
  EXPECT_EQ(gemm_workspace_bytes(q, one, kH200) - gemm_workspace_bytes(q, off, kH200), 2 * kWidenBudgetBytes);
  GemmPolicy small = fast;
  small.widen_budget_bytes = 40 << 20;
  EXPECT_EQ(plan_gemm(moe, small, kH200).lt_pass_experts, 2);  // 16.8 MB a pair
  small.widen_budget_bytes = 1;
  EXPECT_EQ(plan_gemm(moe, small, kH200).lt_pass_experts, 1);  // at least one
}

// An expert's matmuls on the cuBLASLt route (on several streams): experts of 4 rows or more write only
// their own rows (the rows rounded down, then the last four), experts of 1-3 rows multiply 4 (spilling
// past them). Every row is covered, each piece's scales fit the expert's block (kblocks x (rows + 4)
// floats) without overlapping the one before.
TEST(GemmPlan, CublasLtExpertPiecesCoverTheirRows) {
  constexpr int64_t kb = 32;
  const auto pieces = [](int64_t rows) { return lt_expert_pieces(rows, kb); };
  EXPECT_EQ(pieces(0).count, 0);
  for (const int64_t rows : {1, 2, 3}) {
    const LtPieces p = pieces(rows);
    ASSERT_EQ(p.count, 1);
    EXPECT_EQ(p.piece[0].first, 0);
    EXPECT_EQ(p.piece[0].rows, 4);
  }
  const LtPieces nine = pieces(9);
  ASSERT_EQ(nine.count, 2);
  EXPECT_EQ(nine.piece[0].rows, 8);
  EXPECT_EQ(nine.piece[1].first, 5);
  EXPECT_EQ(nine.piece[1].rows, 4);
  EXPECT_EQ(nine.piece[1].scale_offset, 8 * kb);
  EXPECT_EQ(pieces(96).count, 1);
  for (int64_t rows = 1; rows <= 70; ++rows) {
    const LtPieces p = pieces(rows);
    std::vector<int> covered(static_cast<size_t>(rows + 4), 0);
    int64_t scale_end = 0;
    for (int i = 0; i < p.count; ++i) {
      const LtPiece& x = p.piece[i];
      EXPECT_EQ(x.rows % 4, 0);
      EXPECT_GE(x.scale_offset, scale_end) << rows;
      scale_end = x.scale_offset + kb * x.rows;
      for (int64_t r = x.first; r < x.first + x.rows; ++r) ++covered[static_cast<size_t>(r)];
    }
    EXPECT_LE(scale_end, kb * (rows + 4)) << rows;
    for (int64_t r = 0; r < rows; ++r) EXPECT_GE(covered[static_cast<size_t>(r)], 1) << rows << " row " << r;
    // Own rows only, where the expert has four or more: nothing written past it.
    if (rows >= 4) {
      for (int64_t r = rows; r < rows + 4; ++r) EXPECT_EQ(covered[static_cast<size_t>(r)], 0) << rows;
    }
  }
}

TEST(GemmPlan, FastFewRowsTakeTheSmallestRowTile) {
  GemmPolicy fast = policy(Numerics::kFast);
  fast.wgmma_few_min_rows = 0;  // the kernels the swapped one stands in front of
  const int64_t expect[][2] = {{1, 8}, {8, 8}, {9, 16}, {16, 16}, {17, 32}, {33, 32}, {64, 32}};
  for (const auto& [rows, tile] : expect) {
    const GemmPlan plan = plan_gemm(dense(GemmWeightKind::kFp8, rows, 32768, 1024), fast, kH200);
    EXPECT_EQ(plan.route, rows <= 32 ? GemmRoute::kFastGemv : GemmRoute::kFastMma) << rows;
    EXPECT_EQ(plan.fallback, GemmRoute::kFastMma) << rows;
    EXPECT_EQ(plan.tile_rows, tile) << rows;
  }
}

// Up to gemv_max_rows rows a weight (dense rows, or a grouped call's rows over its experts): the
// few-row kernel, with the mma.sync plan kept behind it.
TEST(GemmPlan, FastFewRowsAWeightGoToTheFewRowKernel) {
  GemmPolicy fast = policy(Numerics::kFast);
  fast.wgmma_few_min_rows = 0;  // dense FP8 past 8 rows: the swapped wgmma kernel (below)
  for (auto w : {GemmWeightKind::kFp8, GemmWeightKind::kFp4}) {
    EXPECT_EQ(plan_gemm(dense(w, 1, 4096, 8192), fast, kH200).route, GemmRoute::kFastGemv);
    EXPECT_EQ(plan_gemm(dense(w, 32, 4096, 8192), fast, kH200).route, GemmRoute::kFastGemv);
    EXPECT_EQ(plan_gemm(dense(w, 33, 4096, 8192), fast, kH200).route, GemmRoute::kFastMma);
    EXPECT_EQ(plan_gemm(grouped(w, 6, 256, 2048, 4096), fast, kH200).route, GemmRoute::kFastGemv);
    EXPECT_EQ(plan_gemm(grouped(w, 48, 32, 2048, 4096), fast, kH200).route, GemmRoute::kFastGemv);
    EXPECT_EQ(plan_gemm(grouped(w, 64, 256, 2048, 4096), fast, kH200).route, GemmRoute::kFastGemv);
    // Grouped: up to eight rows an expert (a decode step's routed rows at b32 over 32 experts, b256 over
    // 256), whatever the rows in all; beyond, the mma.sync kernel.
    EXPECT_EQ(plan_gemm(grouped(w, 192, 32, 2048, 4096), fast, kH200).route, GemmRoute::kFastGemv);
    EXPECT_EQ(plan_gemm(grouped(w, 1536, 256, 2048, 4096), fast, kH200).route, GemmRoute::kFastGemv);
    EXPECT_EQ(plan_gemm(grouped(w, 257, 32, 2048, 4096), fast, kH200).route, GemmRoute::kFastMma);
    EXPECT_EQ(plan_gemm(grouped(w, 384, 32, 2048, 4096), fast, kH200).route, GemmRoute::kFastMma);
    EXPECT_EQ(plan_gemm(grouped(w, 9, 1, 2048, 4096), fast, kH200).route, GemmRoute::kFastMma);
  }
  GemmProblem g = dense(GemmWeightKind::kFp8, 4, 1024, 1024);
  g.groups = 2;
  EXPECT_EQ(plan_gemm(g, fast, kH200).route, GemmRoute::kFastGemv);
  // K runs a CTA: wq_b's 2048 row groups fill a wave alone; wo_b's 256 split K eight ways, wq_a's 64
  // too; a decode step's routed pair (6 tiles x 128 x 2) splits four ways (grouped calls fill up to four
  // waves); two K blocks never split.
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kFp8, 1, 32768, 1024), fast, kH200).gemv_k_parts, 1);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kFp8, 1, 4096, 8192), fast, kH200).gemv_k_parts, 8);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kFp8, 8, 1024, 4096), fast, kH200).gemv_k_parts, 8);
  EXPECT_EQ(plan_gemm(grouped(GemmWeightKind::kFp4, 6, 256, 2048, 4096), fast, kH200).gemv_k_parts, 4);
  EXPECT_EQ(plan_gemm(grouped(GemmWeightKind::kFp4, 48, 256, 2048, 4096), fast, kH200).gemv_k_parts, 1);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kFp8, 1, 1024, 256), fast, kH200).gemv_k_parts, 1);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kFp8, 1, 1024, 1024), fast, kH200).gemv_k_parts, 4);
  // Column tiles a CTA: a decode step's routed pair (768 CTAs of four K runs) and its w2 (6 x 128) run three
  // a CTA, 258 CTAs in one wave of two an SM; calls within a wave, of whole-K warps, with several groups,
  // or whose K runs are not whole ring turns run one.
  const auto items = [&](const GemmProblem& q) { return plan_gemm(q, fast, kH200).gemv_items; };
  EXPECT_EQ(items(grouped(GemmWeightKind::kFp4, 6, 256, 2048, 4096)), 3);
  GemmProblem w2 = grouped(GemmWeightKind::kFp4, 6, 256, 4096, 2048);
  w2.pair = false;
  EXPECT_EQ(items(w2), 3);
  EXPECT_EQ(items(grouped(GemmWeightKind::kFp4, 12, 256, 2048, 4096)), 3);  // two K runs, 12 x 64 CTAs
  EXPECT_EQ(items(grouped(GemmWeightKind::kFp4, 48, 256, 2048, 4096)), 1);  // whole-K warps
  EXPECT_EQ(items(dense(GemmWeightKind::kFp8, 1, 32768, 1024)), 1);
  EXPECT_EQ(items(dense(GemmWeightKind::kFp8, 1, 4096, 8192)), 1);
  EXPECT_EQ(items(grouped(GemmWeightKind::kFp4, 6, 256, 2048, 1536)), 1);  // runs of three blocks
  EXPECT_EQ(items(g), 1);
  {
    GemmPolicy one = fast;
    one.gemv_items = 1;
    EXPECT_EQ(plan_gemm(grouped(GemmWeightKind::kFp4, 6, 256, 2048, 4096), one, kH200).gemv_items, 1);
  }
  {  // a policy's K runs (the bench's sweep) override the occupancy rule
    GemmPolicy forced = fast;
    forced.gemv_k_parts = 8;
    EXPECT_EQ(plan_gemm(grouped(GemmWeightKind::kFp4, 6, 256, 2048, 4096), forced, kH200).gemv_k_parts, 8);
    EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kFp8, 1, 32768, 1024), forced, kH200).gemv_k_parts, 8);
  }
  fast.gemv_max_rows = 0;
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kFp8, 1, 4096, 8192), fast, kH200).route, GemmRoute::kFastMma);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kFp8, 1, 4096, 8192), policy(Numerics::kExact), kH200).route,
            GemmRoute::kExactBlock);
}

// A decode batch of a dense FP8 weight (9-64 rows, one group, no pair, N whole 128-row tiles) goes to the
// swapped wgmma kernel, the few-row or mma.sync plan kept whole behind it; its K splits fill one wave of two
// CTAs an SM (a cluster of at most 8 a tile, each at least four blocks). FP4, grouped calls, pairs, fewer
// rows and more stay where they were; the policy's threshold moves it, 0 turns it off.
TEST(GemmPlan, ADecodeBatchOfDenseFp8GoesToSwappedWgmma) {
  const GemmPolicy fast = policy(Numerics::kFast);
  const auto fp8 = GemmWeightKind::kFp8;
  for (const int64_t rows : {9, 16, 17, 32, 33, 64}) {
    const GemmPlan plan = plan_gemm(dense(fp8, rows, 4096, 8192), fast, kH200);
    EXPECT_EQ(plan.route, GemmRoute::kWgmmaFew) << rows;
    EXPECT_EQ(plan.fallback, rows <= 32 ? GemmRoute::kFastGemv : GemmRoute::kFastMma) << rows;
    EXPECT_TRUE(plan.codes) << rows;
    EXPECT_EQ(plan.tile_rows, rows <= 16 ? 16 : 32) << rows;  // the fallback's plan, whole
    EXPECT_EQ(plan.few_splits, 8) << rows;                    // wo_b: 32 tiles x 8 splits = 256 CTAs
  }
  const auto splits = [&](int64_t n, int64_t k) { return plan_gemm(dense(fp8, 32, n, k), fast, kH200).few_splits; };
  EXPECT_EQ(splits(32768, 1024), 1);  // wq_b: 256 tiles fill the wave alone
  EXPECT_EQ(splits(1024, 4096), 8);   // wq_a: 8 tiles, at most 8 splits
  EXPECT_EQ(splits(4096, 2048), 4);   // shared_w2: 16 blocks, four a split
  EXPECT_EQ(splits(2048, 1024), 2);   // eight blocks: two splits of four
  EXPECT_EQ(splits(1024, 512), 1);    // four blocks never split
  EXPECT_EQ(splits(16384, 4096), 2);  // 128 tiles: two splits fill 264 CTAs
  EXPECT_EQ(plan_gemm(dense(fp8, 8, 4096, 8192), fast, kH200).route, GemmRoute::kFastGemv);
  EXPECT_EQ(plan_gemm(dense(fp8, 65, 4096, 8192), fast, kH200).route, GemmRoute::kCublasLt);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kFp4, 32, 4096, 8192), fast, kH200).route, GemmRoute::kFastGemv);
  EXPECT_EQ(plan_gemm(dense(fp8, 32, 1100, 1024), fast, kH200).route, GemmRoute::kFastGemv);  // N off the tiles
  GemmProblem pair = dense(fp8, 32, 2048, 4096);
  pair.pair = true;
  EXPECT_EQ(plan_gemm(pair, fast, kH200).route, GemmRoute::kFastGemv);
  GemmProblem groups = dense(fp8, 32, 1024, 1024);
  groups.groups = 2;
  EXPECT_EQ(plan_gemm(groups, fast, kH200).route, GemmRoute::kFastGemv);
  EXPECT_EQ(plan_gemm(grouped(fp8, 32, 4, 2048, 4096), fast, kH200).route, GemmRoute::kFastGemv);
  EXPECT_EQ(plan_gemm(dense(fp8, 32, 4096, 8192), policy(Numerics::kExact), kH200).route, GemmRoute::kExactBlock);
  GemmPolicy later = fast;
  later.wgmma_few_min_rows = 33;
  EXPECT_EQ(plan_gemm(dense(fp8, 32, 4096, 8192), later, kH200).route, GemmRoute::kFastGemv);
  EXPECT_EQ(plan_gemm(dense(fp8, 33, 4096, 8192), later, kH200).route, GemmRoute::kWgmmaFew);
  later.wgmma_few_min_rows = 0;
  EXPECT_EQ(plan_gemm(dense(fp8, 33, 4096, 8192), later, kH200).route, GemmRoute::kFastMma);
}

// A bf16 weight with its FP8 twin (wo_a: 8 groups of 1024 x 4096) on the fast tier: up to
// twin_gemv_max_rows (2) rows the few-row plain kernel (it reads the twin), more rows cuBLASLt as without
// one; the exact tier never; no twin, the grouped call stays on cuBLASLt.
TEST(GemmPlan, AnFp8TwinTakesTheFewRowPlainKernel) {
  const GemmPolicy fast = policy(Numerics::kFast);
  GemmProblem wo_a = dense(GemmWeightKind::kBf16, 1, 8192, 4096);
  wo_a.groups = 8;
  wo_a.kg = 4096;
  EXPECT_EQ(plan_gemm(wo_a, fast, kH200).route, GemmRoute::kCublasLt);
  wo_a.fp8_twin = true;
  EXPECT_EQ(plan_gemm(wo_a, fast, kH200).route, GemmRoute::kFastPlainGemv);
  wo_a.rows = 2;
  EXPECT_EQ(plan_gemm(wo_a, fast, kH200).route, GemmRoute::kFastPlainGemv);
  wo_a.rows = 3;
  EXPECT_EQ(plan_gemm(wo_a, fast, kH200).route, GemmRoute::kCublasLt);
  GemmPolicy twin8 = fast;  // the threshold is the policy's
  twin8.twin_gemv_max_rows = 8;
  EXPECT_EQ(plan_gemm(wo_a, twin8, kH200).route, GemmRoute::kFastPlainGemv);
  wo_a.rows = 9;
  EXPECT_EQ(plan_gemm(wo_a, twin8, kH200).route, GemmRoute::kCublasLt);
  wo_a.rows = 1;
  EXPECT_EQ(plan_gemm(wo_a, policy(Numerics::kExact), kH200).route, GemmRoute::kExactPlain);
  wo_a.kg = 4000;  // not whole 128-blocks: no twin route
  EXPECT_NE(plan_gemm(wo_a, fast, kH200).route, GemmRoute::kFastPlainGemv);
}

TEST(GemmPlan, FastSplitsKUntilTheGpuIsFull) {
  const GemmPolicy fast = policy(Numerics::kFast);
  // wo_b at one row: 16 column tiles, 64 K blocks: 17 splits fill 2 CTAs an SM.
  GemmPlan plan = plan_gemm(dense(GemmWeightKind::kFp8, 1, 4096, 8192), fast, kH200);
  EXPECT_EQ(plan.splits, 17);
  EXPECT_EQ(plan.workspace_floats, 17 * 4096);
  EXPECT_EQ(plan.workspace_counters, 16);  // one per CTA tile
  EXPECT_TRUE(plan.resident);
  // wq_b: 128 column tiles of 8 blocks: three splits.
  plan = plan_gemm(dense(GemmWeightKind::kFp8, 1, 32768, 1024), fast, kH200);
  EXPECT_EQ(plan.splits, 3);
  // Two K blocks cannot split; a full GPU does not.
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kFp8, 1, 1024, 256), fast, kH200).splits, 1);
  plan = plan_fast_mma(dense(GemmWeightKind::kFp8, 96, 32768, 4096), fast, kH200);
  EXPECT_EQ(plan.splits, 1);
  EXPECT_FALSE(plan.resident);  // 32 rows of 4096 codes: staged, not kept
  EXPECT_EQ(plan.workspace_counters, 0);
  // More CTAs an SM asked for: more splits.
  GemmPolicy deep = fast;
  deep.ctas_per_sm = 4;
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kFp8, 1, 32768, 4096), deep, kH200).splits, 5);
}

// Activations stay resident when the tile's codes for a split fit; a long K is split further for it
// while the CTAs still fit one wave.
TEST(GemmPlan, FastSplitsFurtherToKeepActivationsResident) {
  const GemmPolicy fast = policy(Numerics::kFast);
  // 8 rows of K 16384: 128 blocks; 64 column tiles ask for 5 splits, 26 blocks keep 8 x 3344 B resident.
  GemmPlan plan = plan_gemm(dense(GemmWeightKind::kFp8, 8, 16384, 16384), fast, kH200);
  EXPECT_EQ(plan.splits, 5);
  EXPECT_TRUE(plan.resident);
  // 16 rows over 2 column tiles: 132 splits wanted, but the last CTA adds 16 x 256 outputs a split:
  // three at most (kMaxSplitReduce), too long to stay resident.
  plan = plan_gemm(dense(GemmWeightKind::kFp8, 16, 512, 16384), fast, kH200);
  EXPECT_FALSE(plan.resident);
  EXPECT_EQ(plan.splits, 3);
  // One row over the same: the reduction is short, 33 splits.
  plan = plan_gemm(dense(GemmWeightKind::kFp8, 1, 512, 16384), fast, kH200);
  EXPECT_TRUE(plan.resident);
  EXPECT_EQ(plan.splits, 33);
  // 32 rows, a full wave already: no split for residency.
  plan = plan_fast_mma(dense(GemmWeightKind::kFp4, 32, 65536, 4096), fast, kH200);
  EXPECT_EQ(plan.splits, 1);
  EXPECT_FALSE(plan.resident);
}

TEST(GemmPlan, FastGroupedExpertsTileByRowsPerExpert) {
  const GemmPolicy fast = policy(Numerics::kFast);
  // Decode: one row per expert; the pair doubles the CTAs, the workspace holds both halves.
  GemmPlan plan = plan_gemm(grouped(GemmWeightKind::kFp4, 8, 256, 2048, 4096), fast, kH200);
  EXPECT_EQ(plan.route, GemmRoute::kFastGemv);
  EXPECT_EQ(plan.fallback, GemmRoute::kFastMma);
  EXPECT_EQ(plan.tile_rows, 8);
  EXPECT_EQ(plan.splits, 3);  // 8 tiles x 8 column tiles x 2 = 128 CTAs of 264 wanted
  EXPECT_EQ(plan.workspace_floats, 2 * 3 * 8 * 2048);
  EXPECT_EQ(plan.workspace_counters, 128);
  EXPECT_TRUE(plan.resident);
  // Prefill on the mma.sync kernel (wgmma off): many rows per expert, the GPU full without splits.
  GemmPolicy no_wgmma = fast;
  no_wgmma.wgmma_min_rows = int64_t{1} << 40;
  plan = plan_gemm(grouped(GemmWeightKind::kFp4, 49152, 32, 2048, 4096), no_wgmma, kH200);
  EXPECT_EQ(plan.tile_rows, 32);
  EXPECT_EQ(plan.splits, 1);
  EXPECT_EQ(plan.workspace_floats, 0);
  // A decode batch of 32 over 32 experts (192 routed rows): the few-row kernel, with mma.sync tiles of 8
  // and resident activations behind it; b48 (9 rows an expert): mma.sync tiles of 16.
  plan = plan_gemm(grouped(GemmWeightKind::kFp4, 192, 32, 2048, 4096), fast, kH200);
  EXPECT_EQ(plan.route, GemmRoute::kFastGemv);
  EXPECT_EQ(plan.fallback, GemmRoute::kFastMma);
  EXPECT_EQ(plan.tile_rows, 8);
  EXPECT_TRUE(plan.resident);
  plan = plan_gemm(grouped(GemmWeightKind::kFp4, 288, 32, 2048, 4096), fast, kH200);
  EXPECT_EQ(plan.route, GemmRoute::kFastMma);
  EXPECT_EQ(plan.tile_rows, 16);
  // Grouped calls never go to cuBLASLt.
  EXPECT_EQ(plan_gemm(grouped(GemmWeightKind::kFp8, 49152, 32, 2048, 4096), fast, kH200).route, GemmRoute::kWgmma);
}

TEST(GemmPlan, FastPlainWeights) {
  const GemmPolicy fast = policy(Numerics::kFast);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kBf16, 32, 8192, 4096), fast, kH200).route, GemmRoute::kCublasLt);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kBf16, 32, 8192, 4096), fast, kH200).fallback, GemmRoute::kExactPlain);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kF32, 32, 512, 4096), fast, kH200).route, GemmRoute::kExactPlain);
  // fp32 weights of many rows: fused multiply-add chains, the exact plain kernel behind them.
  GemmPlan f32 = plan_gemm(dense(GemmWeightKind::kF32, 64, 1024, 4096), fast, kH200);
  EXPECT_EQ(f32.route, GemmRoute::kFastSgemm);
  EXPECT_EQ(f32.fallback, GemmRoute::kExactPlain);
  GemmProblem f32_pair = dense(GemmWeightKind::kF32, 2048, 1024, 4096);
  f32_pair.pair = true;
  EXPECT_EQ(plan_gemm(f32_pair, fast, kH200).route, GemmRoute::kFastSgemm);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kF32, 2048, 1024, 4104), fast, kH200).route, GemmRoute::kExactPlain);
  GemmProblem bf16_pair = f32_pair;  // the compressor's: two cuBLASLt calls, else the CUDA-core kernel
  bf16_pair.weight = GemmWeightKind::kBf16;
  EXPECT_EQ(plan_gemm(bf16_pair, fast, kH200).route, GemmRoute::kCublasLt);
  EXPECT_EQ(plan_gemm(bf16_pair, fast, kH200).fallback, GemmRoute::kFastSgemm);
  GemmPolicy no_lt = fast;
  no_lt.cublaslt = false;
  EXPECT_EQ(plan_gemm(bf16_pair, no_lt, kH200).route, GemmRoute::kFastSgemm);
  bf16_pair.rows = 8;  // decode: the few-row kernel's one launch; 9 rows: cuBLASLt's two calls
  EXPECT_EQ(plan_gemm(bf16_pair, fast, kH200).route, GemmRoute::kFastPlainGemv);
  EXPECT_EQ(plan_gemm(bf16_pair, fast, kH200).fallback, GemmRoute::kExactPlain);
  bf16_pair.rows = 9;
  EXPECT_EQ(plan_gemm(bf16_pair, fast, kH200).route, GemmRoute::kCublasLt);
  EXPECT_EQ(plan_gemm(bf16_pair, fast, kH200).fallback, GemmRoute::kExactPlain);
  EXPECT_EQ(plan_gemm(bf16_pair, no_lt, kH200).route, GemmRoute::kExactPlain);
  f32_pair.exact = true;
  EXPECT_EQ(plan_gemm(f32_pair, fast, kH200).route, GemmRoute::kExactPlain);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kF32, 2048, 1024, 4096), policy(Numerics::kExact), kH200).route,
            GemmRoute::kExactPlain);
  GemmProblem pair = dense(GemmWeightKind::kBf16, 1, 512, 4096);
  pair.pair = true;  // on the exact tier the exact plain kernel takes a pair in one launch
  EXPECT_EQ(plan_gemm(pair, policy(Numerics::kExact), kH200).route, GemmRoute::kExactPlain);
  // Few rows: fp32 weights (the MoE gate) and narrow bf16 ones (weights_proj) on the few-row kernel;
  // a wide bf16 one (the head) on cuBLASLt.
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kF32, 1, 256, 4096), fast, kH200).route, GemmRoute::kFastPlainGemv);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kBf16, 1, 64, 4096), fast, kH200).route, GemmRoute::kFastPlainGemv);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kBf16, 1, 129280, 4096), fast, kH200).route, GemmRoute::kCublasLt);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kF32, 1, 256, 4100), fast, kH200).route, GemmRoute::kExactPlain);
}

// Narrow few-row plain calls split each column's K over more warps until one weight's CTAs fill the
// SMs once; a pair splits as each of its weights alone (the same bits), a twin never.
TEST(GemmPlan, NarrowPlainCallsSplitTheirColumnsK) {
  const GemmPolicy fast = policy(Numerics::kFast);
  auto parts = [&](GemmWeightKind w, int64_t n, int64_t k, bool pair) {
    GemmProblem p = dense(w, 1, n, k);
    p.pair = pair;
    const GemmPlan plan = plan_gemm(p, fast, kH200);
    EXPECT_EQ(plan.route, GemmRoute::kFastPlainGemv) << n << " x " << k;
    return plan.plain_k_parts;
  };
  EXPECT_EQ(parts(GemmWeightKind::kF32, 32, 4096, false), 8);   // the preset's gate: 32 CTAs, not 4
  EXPECT_EQ(parts(GemmWeightKind::kF32, 256, 4096, false), 4);  // V4-Flash's gate: 128 CTAs
  EXPECT_EQ(parts(GemmWeightKind::kBf16, 64, 4096, false), 8);  // weights_proj
  EXPECT_EQ(parts(GemmWeightKind::kF32, 1024, 4096, true), 1);  // a compressor's pair fills the GPU
  EXPECT_EQ(parts(GemmWeightKind::kF32, 256, 4096, true), 4);   // a pair as its weights alone
  EXPECT_EQ(parts(GemmWeightKind::kF32, 515, 2048, false), 2);
  EXPECT_EQ(parts(GemmWeightKind::kF32, 64, 1024, false), 4);  // every warp keeps a 256-wide slice
  EXPECT_EQ(parts(GemmWeightKind::kF32, 100, 48, false), 1);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kF32, 1, 32, 4096), fast, DeviceCaps{16}).plain_k_parts, 4);
  GemmProblem twin = dense(GemmWeightKind::kBf16, 1, 8192, 4096);
  twin.groups = 8;
  twin.fp8_twin = true;
  EXPECT_EQ(plan_gemm(twin, fast, kH200).route, GemmRoute::kFastPlainGemv);
  EXPECT_EQ(plan_gemm(twin, fast, kH200).plain_k_parts, 1);
}

TEST(GemmPlan, ShapesTheFastKernelRefusesStayExact) {
  const GemmPolicy fast = policy(Numerics::kFast);
  EXPECT_EQ(plan_gemm(dense(GemmWeightKind::kFp8, 1, 4096, 32768), fast, kH200).route, GemmRoute::kExactBlock);
  GemmProblem g = dense(GemmWeightKind::kFp8, 1, 2 * 192, 1024);
  g.groups = 2;  // 192-column groups split a 128-row scale block
  EXPECT_EQ(plan_gemm(g, fast, kH200).route, GemmRoute::kExactBlock);
  g.weight = GemmWeightKind::kFp4;  // FP4 scales are per row
  EXPECT_EQ(plan_gemm(g, fast, kH200).route, GemmRoute::kFastGemv);
  EXPECT_EQ(plan_gemm(g, fast, kH200).fallback, GemmRoute::kFastMma);
}

// The runner's scratch for a step: codes and scales on both tiers, the exact tier's digit planes of the
// routed rows and the largest FP8 weight, the fast kernel's split-K partial sums, cuBLASLt's workspace.
TEST(GemmPlan, WorkspaceCoversEachTiersScratch) {
  const GemmWorkspaceQuery q{
      .rows = 2048, .routed_rows = 6 * 2048, .max_k = 8192, .max_n = 4096, .largest_fp8_weight = 32768 * 1024};
  const int64_t codes = 12288 * 8192 + 12288 * 64 * 4 + 32 * 64 * 4;
  EXPECT_EQ(gemm_workspace_bytes(q, policy(Numerics::kExact), kH200),
            codes + 3 * (12288 * 8192 + 32768 * 1024) + kCublasLtWorkspaceBytes);
  // Fast: wo_b-wide pairs split K most at one row (17 splits of 2 x 4096 floats), the widening's budget.
  const int64_t fast = gemm_workspace_bytes(q, policy(Numerics::kFast), kH200);
  EXPECT_GE(fast, codes + 4 * 2 * 17 * 4096 + 2 * kWidenBudgetBytes + kCublasLtWorkspaceBytes);
  // ... and two buffers of the FP4 widening's budget (a pair of the widest weight past it: cuBLASLt's route
  // re-encodes a pass ahead), a cuBLASLt workspace a stream of the experts' matmuls.
  EXPECT_LT(fast, codes + (int64_t{64} << 20) + 2 * kWidenBudgetBytes + 4 * kCublasLtWorkspaceBytes);
  // More rows, more codes.
  GemmWorkspaceQuery more = q;
  more.rows = more.routed_rows = 4 * q.routed_rows;
  EXPECT_GT(gemm_workspace_bytes(more, policy(Numerics::kFast), kH200), fast);
}

TEST(GemmPlan, BadProblemsThrow) {
  const GemmPolicy fast = policy(Numerics::kFast);
  EXPECT_THROW(plan_gemm(dense(GemmWeightKind::kFp8, 1, 0, 1024), fast, kH200), Error);
  GemmProblem g = dense(GemmWeightKind::kFp8, 1, 1000, 1024);
  g.groups = 3;
  EXPECT_THROW(plan_gemm(g, fast, kH200), Error);
  EXPECT_THROW(plan_gemm(dense(GemmWeightKind::kFp8, -1, 128, 1024), fast, kH200), Error);
}

// Sparse attention's lists (64-entry blocks) split over CTAs where the waves end sooner: a decode token's
// CSA list (window 128 + top-512: 10 blocks) into ten at b1 and four at b32, a 1M-token HCA list (130
// blocks) into 130 at b1, none where the tokens fill the GPU (a prefill chunk).
TEST(GemmPlan, AttentionListsSplitWhereTheWavesEndSooner) {
  EXPECT_EQ(attention_blocks_per_split(1, 10, 132), 1);
  EXPECT_EQ(attention_blocks_per_split(32, 10, 132), 3);
  EXPECT_EQ(attention_blocks_per_split(1, 130, 132), 1);
  EXPECT_EQ(attention_blocks_per_split(2048, 10, 132), 10);
  EXPECT_EQ(attention_blocks_per_split(1, 1, 132), 1);
}

TEST(GemmPlan, PolicyComesFromTheEnvironmentAndDescribesItself) {
  ::setenv("DSV4_GEMM_CUBLASLT", "0", 1);
  ::setenv("DSV4_GEMM_FAST_MMA_MAX_ROWS", "128", 1);
  ::setenv("DSV4_GEMM_WGMMA_MIN_ROWS", "200", 1);
  ::setenv("DSV4_GEMM_FAST_GEMV_MAX_ROWS", "4", 1);
  GemmPolicy p = GemmPolicy::from_env(Numerics::kFast);
  ::unsetenv("DSV4_GEMM_WGMMA_MIN_ROWS");
  ::unsetenv("DSV4_GEMM_FAST_GEMV_MAX_ROWS");
  EXPECT_EQ(p.gemv_max_rows, 4);
  EXPECT_NE(p.describe().find("FP4 per 32 (wgmma: per 128); few-row kernel up to 4 rows"), std::string::npos)
      << p.describe();
  EXPECT_NE(p.describe().find("up to 4 rows a weight, 8 an expert (FP8 twins 2; column tiles a CTA by one wave)"),
            std::string::npos)
      << p.describe();
  GemmPolicy one = p;
  one.gemv_items = 1;
  EXPECT_NE(one.describe().find("column tiles a CTA 1)"), std::string::npos);
  EXPECT_NE(p.describe().find("fused with the post before it up to 64 tokens"), std::string::npos) << p.describe();
  ::setenv("DSV4_GEMM_GEMV_GROUPED_MAX_ROWS", "16", 1);
  EXPECT_EQ(GemmPolicy::from_env(Numerics::kFast).gemv_grouped_max_rows, 16);
  ::unsetenv("DSV4_GEMM_GEMV_GROUPED_MAX_ROWS");
  ::setenv("DSV4_HC_POST_PRE_MAX_TOKENS", "0", 1);
  EXPECT_EQ(GemmPolicy::from_env(Numerics::kFast).hc_post_pre_max_tokens, 0);
  ::unsetenv("DSV4_HC_POST_PRE_MAX_TOKENS");
  EXPECT_NE(p.describe().find("dense FP8 on swapped wgmma from 9 to 64 rows"), std::string::npos) << p.describe();
  ::setenv("DSV4_GEMM_WGMMA_FEW_MIN_ROWS", "0", 1);
  EXPECT_NE(GemmPolicy::from_env(Numerics::kFast).describe().find("dense FP8 on swapped wgmma off"), std::string::npos);
  ::unsetenv("DSV4_GEMM_WGMMA_FEW_MIN_ROWS");
  EXPECT_NE(p.describe().find("attention's shadow from 1024 tokens"), std::string::npos) << p.describe();
  ::setenv("DSV4_ATTENTION_SHADOW_MIN_TOKENS", "0", 1);
  EXPECT_NE(GemmPolicy::from_env(Numerics::kFast).describe().find("attention's shadow off"), std::string::npos);
  ::unsetenv("DSV4_ATTENTION_SHADOW_MIN_TOKENS");
  EXPECT_NE(p.describe().find("indexer dots on wgmma"), std::string::npos) << p.describe();
  ::setenv("DSV4_INDEXER_DOTS", "mma", 1);
  EXPECT_EQ(GemmPolicy::from_env(Numerics::kFast).indexer_dots, IndexerDots::kMmaSync);
  ::setenv("DSV4_INDEXER_DOTS", "cuda-cores", 1);
  EXPECT_NE(GemmPolicy::from_env(Numerics::kFast).describe().find("indexer dots on CUDA cores"), std::string::npos);
  ::setenv("DSV4_INDEXER_DOTS", "tensor", 1);
  EXPECT_THROW(GemmPolicy::from_env(Numerics::kFast), Error);
  ::unsetenv("DSV4_INDEXER_DOTS");
  EXPECT_NE(p.describe().find("FP4 widened before the call from 1024 rows an expert"), std::string::npos)
      << p.describe();
  EXPECT_NE(p.describe().find("hc_pre norm fused"), std::string::npos) << p.describe();
  EXPECT_NE(p.describe().find("FP4 experts on cuBLASLt off"), std::string::npos) << p.describe();  // cuBLASLt off
  // Switches whose alternatives lost a measurement are refused, not ignored.
  for (const char* retired : {"DSV4_GEMM_FP4_PER128",       "DSV4_INDEXER_MMA",        "DSV4_GEMM_FP4_PREWIDEN",
                              "DSV4_HC_FUSED_NORM",         "DSV4_GEMM_FP4_MMA_RING",  "DSV4_GEMM_FP4_SPLIT",
                              "DSV4_GEMM_GROUPED_RESIDENT", "DSV4_GEMM_FP4_SHIFT",     "DSV4_GEMM_WGMMA_SPECIALIZED",
                              "DSV4_GEMM_GEMV_FP4_STAGED",  "DSV4_GEMM_GEMV_WGMMA",    "DSV4_GEMM_LT_WIDEN_AHEAD",
                              "DSV4_GEMM_GEMV_EARLY",       "DSV4_GEMM_GEMV_PREFETCH", "DSV4_HC_CLUSTER",
                              "DSV4_ATTENTION_CLUSTER",     "DSV4_GATE_CLUSTER",       "DSV4_GEMM_GEMV_ITEMS",
                              "DSV4_GEMM_WGMMA_FEW_BF16",   "DSV4_ATTENTION_WGMMA"}) {
    ::setenv(retired, "0", 1);
    EXPECT_THROW(check_env_switches(), Error) << retired;
    ::unsetenv(retired);
  }
  ::setenv("DSV4_HC_RING", "0", 1);
  const GemmPolicy exact = GemmPolicy::from_env(Numerics::kExact);
  ::unsetenv("DSV4_HC_RING");
  EXPECT_TRUE(p.hc_fused_norm && p.hc_ring && p.hc_products);
  EXPECT_NE(exact.describe().find("hc_pre chain products first on, ring off, norm fused"), std::string::npos)
      << exact.describe();
  EXPECT_FALSE(p.cublaslt);
  EXPECT_EQ(p.wgmma_min_rows, 200);
  EXPECT_EQ(p.fast_mma_max_rows, 128);
  EXPECT_NE(p.describe().find("wgmma from 200 rows"), std::string::npos) << p.describe();
  EXPECT_NE(p.describe().find("fast"), std::string::npos);
  EXPECT_NE(p.describe().find("cuBLASLt off"), std::string::npos);
  ::setenv("DSV4_GEMM_CUBLASLT", "2", 1);
  EXPECT_THROW(GemmPolicy::from_env(Numerics::kFast), Error);
  ::setenv("DSV4_GEMM_FAST_MMA_MAX_ROWS", "x", 1);
  ::unsetenv("DSV4_GEMM_CUBLASLT");
  EXPECT_THROW(GemmPolicy::from_env(Numerics::kFast), Error);
  ::unsetenv("DSV4_GEMM_FAST_MMA_MAX_ROWS");
  EXPECT_NE(GemmPolicy::from_env(Numerics::kFast)
                .describe()
                .find("FP4 experts on cuBLASLt from 224 rows an expert, 4 streams, re-encoded once and kept (then "
                      "from 64 rows);"),
            std::string::npos);
  ::setenv("DSV4_GEMM_LT_KEPT_MIN_ROWS", "96", 1);
  EXPECT_EQ(GemmPolicy::from_env(Numerics::kFast).lt_kept_min_rows, 96);
  ::unsetenv("DSV4_GEMM_LT_KEPT_MIN_ROWS");
  ::setenv("DSV4_GEMM_LT_EXPERT_STREAMS", "2", 1);
  EXPECT_EQ(GemmPolicy::from_env(Numerics::kFast).lt_expert_streams, 2);
  EXPECT_NE(GemmPolicy::from_env(Numerics::kFast).describe().find("224 rows an expert, 2 streams, re-encoded"),
            std::string::npos);
  ::setenv("DSV4_GEMM_LT_EXPERT_STREAMS", "0", 1);
  EXPECT_EQ(GemmPolicy::from_env(Numerics::kFast).lt_expert_streams, 1);
  ::unsetenv("DSV4_GEMM_LT_EXPERT_STREAMS");
  ::setenv("DSV4_GEMM_LT_EXPERTS_MIN_ROWS", "0", 1);
  EXPECT_EQ(GemmPolicy::from_env(Numerics::kFast).lt_experts_min_rows, 0);
  EXPECT_NE(GemmPolicy::from_env(Numerics::kFast).describe().find("FP4 experts on cuBLASLt off"), std::string::npos);
  ::unsetenv("DSV4_GEMM_LT_EXPERTS_MIN_ROWS");
  EXPECT_TRUE(GemmPolicy::from_env(Numerics::kFast).lt_experts_resident);
  ::setenv("DSV4_GEMM_LT_EXPERTS_RESIDENT", "0", 1);
  EXPECT_FALSE(GemmPolicy::from_env(Numerics::kFast).lt_experts_resident);
  EXPECT_NE(GemmPolicy::from_env(Numerics::kFast).describe().find("224 rows an expert, 4 streams;"), std::string::npos);
  ::setenv("DSV4_GEMM_LT_EXPERTS_RESIDENT", "yes", 1);
  EXPECT_THROW(GemmPolicy::from_env(Numerics::kFast), Error);
  ::unsetenv("DSV4_GEMM_LT_EXPERTS_RESIDENT");
  p = GemmPolicy::from_env(Numerics::kExact);
  EXPECT_TRUE(p.cublaslt);
  EXPECT_NE(p.describe().find("exact"), std::string::npos);
}

}  // namespace
}  // namespace dsv4::cuda
