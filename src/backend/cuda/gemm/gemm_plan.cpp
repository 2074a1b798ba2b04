#include "backend/cuda/gemm/gemm_plan.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <string_view>

#include "core/env.h"
#include "core/error.h"

namespace dsv4::cuda {
namespace {

int64_t env_count(const char* name, int64_t fallback) {
  const std::string_view v = env_value(name);
  if (v.empty()) return fallback;
  int64_t out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  DSV4_CHECK(ec == std::errc() && end == v.data() + v.size() && out >= 0, "{}={}: expected a count", name, v);
  return out;
}

bool block_scaled(GemmWeightKind k) { return k == GemmWeightKind::kFp8 || k == GemmWeightKind::kFp4; }

// The exact tier's plan: the exact kernels, which route block-scaled calls among themselves.
GemmPlan exact_plan(const GemmProblem& p) {
  GemmPlan plan;
  plan.route = plan.fallback = block_scaled(p.weight) ? GemmRoute::kExactBlock : GemmRoute::kExactPlain;
  return plan;
}

int fast_tile_rows(const GemmProblem& p) {
  const int64_t per_weight = p.experts > 0 ? ceil_div(p.rows, p.experts) : p.rows;
  return per_weight <= 8 ? 8 : per_weight <= 16 ? 16 : 32;
}

}  // namespace

GemmPolicy GemmPolicy::from_env(Numerics numerics) {
  GemmPolicy p;
  p.numerics = numerics;
  p.cublaslt = env_switch("DSV4_GEMM_CUBLASLT") != "0";
  p.fast_mma_max_rows = env_count("DSV4_GEMM_FAST_MMA_MAX_ROWS", p.fast_mma_max_rows);
  p.gemv_max_rows = env_count("DSV4_GEMM_FAST_GEMV_MAX_ROWS", p.gemv_max_rows);
  p.gemv_grouped_max_rows = env_count("DSV4_GEMM_GEMV_GROUPED_MAX_ROWS", p.gemv_grouped_max_rows);
  p.wgmma_min_rows = std::max<int64_t>(1, env_count("DSV4_GEMM_WGMMA_MIN_ROWS", p.wgmma_min_rows));
  p.wgmma_few_min_rows = env_count("DSV4_GEMM_WGMMA_FEW_MIN_ROWS", p.wgmma_few_min_rows);
  p.ctas_per_sm = static_cast<int>(std::max<int64_t>(1, env_count("DSV4_GEMM_CTAS_PER_SM", p.ctas_per_sm)));
  p.exact_imma = env_switch("DSV4_GEMM_IMMA") != "0";
  p.imma_min_rows = std::max<int64_t>(1, env_count("DSV4_GEMM_IMMA_MIN_ROWS", p.imma_min_rows));
  p.lt_experts_min_rows = std::max<int64_t>(0, env_count("DSV4_GEMM_LT_EXPERTS_MIN_ROWS", p.lt_experts_min_rows));
  p.lt_experts_resident = env_switch("DSV4_GEMM_LT_EXPERTS_RESIDENT") != "0";
  p.lt_kept_min_rows = std::max<int64_t>(1, env_count("DSV4_GEMM_LT_KEPT_MIN_ROWS", p.lt_kept_min_rows));
  p.lt_expert_streams =
      static_cast<int>(std::clamp<int64_t>(env_count("DSV4_GEMM_LT_EXPERT_STREAMS", p.lt_expert_streams), 1, 8));
  p.hc_products = env_switch("DSV4_HC_PRODUCTS") != "0";
  p.hc_ring = env_switch("DSV4_HC_RING") != "0";
  p.hc_post_pre_max_tokens = std::max<int64_t>(0, env_count("DSV4_HC_POST_PRE_MAX_TOKENS", p.hc_post_pre_max_tokens));
  p.attention_shadow_min_tokens =
      std::max<int64_t>(0, env_count("DSV4_ATTENTION_SHADOW_MIN_TOKENS", p.attention_shadow_min_tokens));
  const std::string_view dots = env_switch("DSV4_INDEXER_DOTS");
  if (dots == "cuda-cores") p.indexer_dots = IndexerDots::kCudaCores;
  if (dots == "mma") p.indexer_dots = IndexerDots::kMmaSync;
  if (dots == "wgmma") p.indexer_dots = IndexerDots::kWgmma;
  return p;
}

std::string GemmPolicy::describe() const {
  const std::string hc = fmt::format("hc_pre chain products first {}, ring {}, norm {}", hc_products ? "on" : "off",
                                     hc_ring ? "on" : "off", hc_fused_norm ? "fused" : "apart");
  if (numerics == Numerics::kExact) {
    return exact_imma ? fmt::format("exact (block sums exact, the CPU's bits; int8 tensor cores from {} rows; {})",
                                    imma_min_rows, hc)
                      : fmt::format("exact (block sums exact, the CPU's bits; SIMT kernels only; {})", hc);
  }
  return fmt::format(
      "fast (FP8 tensor cores with per-block promotion, FP4 per 32 (wgmma: per 128); few-row kernel "
      "up to {} rows a weight, {} an expert (FP8 twins {}; column tiles a CTA {}); dense FP8 on swapped wgmma {}; "
      "cuBLASLt {} above {} rows; wgmma from {} rows a weight, FP4 widened {}; FP4 experts on cuBLASLt {}; "
      "{} CTAs an SM; "
      "indexer dots on {}; hc_pre norm {}, fused with the post before it up to {} tokens; attention's shadow {})",
      gemv_max_rows, gemv_grouped_max_rows, twin_gemv_max_rows,
      gemv_items > 0 ? std::to_string(gemv_items) : "by one wave",
      wgmma_few_min_rows > 0 ? fmt::format("from {} to {} rows", wgmma_few_min_rows, kWgmmaFewMaxRows) : "off",
      cublaslt ? "on" : "off", fast_mma_max_rows, wgmma_min_rows,
      fp4_prewiden ? fmt::format("before the call from {} rows an expert", prewiden_min_rows) : "in shared memory",
      cublaslt && lt_experts_min_rows > 0
          ? fmt::format("from {} rows an expert, {} stream{}{}", lt_experts_min_rows, lt_expert_streams,
                        lt_expert_streams == 1 ? "" : "s",
                        lt_experts_resident
                            ? fmt::format(", re-encoded once and kept (then from {} rows)", lt_kept_min_rows)
                            : "")
          : "off",
      ctas_per_sm, indexer_dots_name(indexer_dots), hc_fused_norm ? "fused" : "apart", hc_post_pre_max_tokens,
      attention_shadow_min_tokens > 0 ? fmt::format("from {} tokens", attention_shadow_min_tokens) : "off");
}

const char* indexer_dots_name(IndexerDots d) {
  switch (d) {
    case IndexerDots::kCudaCores:
      return "CUDA cores";
    case IndexerDots::kMmaSync:
      return "mma.sync";
    case IndexerDots::kWgmma:
      return "wgmma";
  }
  return "?";
}

const char* route_name(GemmRoute r) {
  switch (r) {
    case GemmRoute::kExactBlock:
      return "exact-block";
    case GemmRoute::kExactPlain:
      return "exact-plain";
    case GemmRoute::kCublasLt:
      return "cublaslt";
    case GemmRoute::kFastMma:
      return "fast-mma";
    case GemmRoute::kWgmma:
      return "wgmma";
    case GemmRoute::kFastSgemm:
      return "fast-sgemm";
    case GemmRoute::kFastGemv:
      return "fast-gemv";
    case GemmRoute::kFastPlainGemv:
      return "fast-plain-gemv";
    case GemmRoute::kCublasLtExperts:
      return "cublaslt-experts";
    case GemmRoute::kWgmmaFew:
      return "wgmma-few";
  }
  return "?";
}

bool fast_mma_takes(GemmWeightKind kind, int64_t kg, int64_t ng, int groups) {
  if (!block_scaled(kind) || kg <= 0 || kg % 128 != 0 || kg > kFastMmaMaxK || ng <= 0) return false;
  return groups == 1 || kind == GemmWeightKind::kFp4 || ng % 128 == 0;
}

GemmPlan plan_fast_mma(const GemmProblem& p, const GemmPolicy& policy, const DeviceCaps& caps) {
  GemmPlan plan;
  plan.route = plan.fallback = GemmRoute::kFastMma;
  plan.codes = true;
  plan.tile_rows = fast_tile_rows(p);
  const int64_t ng = p.n / p.groups, blocks = p.kg / 128, max_splits = std::max<int64_t>(1, blocks / kMinSplitBlocks);
  const int64_t ctas = row_tiles(p.rows, plan.tile_rows, p.experts) * p.groups *
                       ceil_div(ng, fast_mma_cta_cols(plan.tile_rows)) * (p.pair ? 2 : 1);
  const int64_t want = int64_t{caps.sm_count} * policy.ctas_per_sm;
  const int64_t per_weight = p.experts > 0 ? ceil_div(p.rows, p.experts) : p.rows;
  const int64_t reduce_rows = std::min<int64_t>(per_weight, plan.tile_rows) * fast_mma_cta_cols(plan.tile_rows);
  const int64_t reduce_cap = std::max<int64_t>(1, std::min(max_splits, 1 + kMaxSplitReduce / reduce_rows));
  int64_t splits = ctas < want ? std::clamp<int64_t>(ceil_div(want, ctas), 1, reduce_cap) : 1;
  // More splits where that lets the activations stay resident, while the CTAs still fit one wave and
  // each split keeps its blocks.
  auto resident = [&](int64_t s) {
    return plan.tile_rows * fast_mma_resident_pitch(p.weight, ceil_div(blocks, s)) <= kFastMmaResidentBytes;
  };
  while (!resident(splits) && splits < reduce_cap && ctas * (splits + 1) <= want) ++splits;
  plan.splits = static_cast<int>(splits);
  plan.resident = resident(splits);
  if (plan.splits > 1) {
    plan.workspace_floats = (p.pair ? 2 : 1) * int64_t{plan.splits} * p.rows * p.n;
    plan.workspace_counters = ctas;
  }
  return plan;
}

int fast_gemv_k_parts(const GemmProblem& p, const DeviceCaps& caps) {
  constexpr int64_t kTileRows = 8, kWarpsPerSm = 16;
  const int64_t tiles = p.experts > 0 ? row_tiles(p.rows, kTileRows, p.experts) : ceil_div(p.rows, kTileRows);
  const int64_t warps = tiles * p.groups * ceil_div(p.n / p.groups, 16) * (p.pair ? 2 : 1);
  const int64_t slots = int64_t{caps.sm_count} * kWarpsPerSm, blocks = p.kg / 128;
  // Grouped calls (the MoE's few routed rows) split up to four waves' worth: more weight bytes in flight
  // (b1: 4 runs measured 9-11% faster than the one-wave rule's 1; b8 unchanged; docs/perf.md).
  const int64_t room = p.experts > 0 ? 4 * slots : slots;
  int parts = 1;
  while (parts < 8 && 4 * parts <= blocks && 2 * parts * warps <= room) parts *= 2;
  return parts;
}

int fast_gemv_items(const GemmProblem& p, int k_parts, const DeviceCaps& caps) {
  constexpr int64_t kTileRows = 8, kCtasPerSm = 2, kWarps = 8;
  const int64_t blocks = p.kg / 128, slots = int64_t{caps.sm_count} * kCtasPerSm;
  if (k_parts < 2 || p.groups != 1 || blocks % (int64_t{k_parts} * kFastGemvDepth) != 0) return 1;
  const int64_t tiles = p.experts > 0 ? row_tiles(p.rows, kTileRows, p.experts) : ceil_div(p.rows, kTileRows);
  const int64_t cols = ceil_div(p.n, 16 * (kWarps / k_parts)) * (p.pair ? 2 : 1);
  int64_t items = 1;
  while (items < cols && tiles * ceil_div(cols, items) > slots) ++items;
  return static_cast<int>(items);
}

int fast_plain_gemv_k_parts(const GemmProblem& p, const DeviceCaps& caps) {
  if (p.fp8_twin && p.weight == GemmWeightKind::kBf16) return 1;
  // One weight's columns: a pair's outputs keep the bits each of its weights gives alone.
  int parts = 1;
  while (parts < 8 && ceil_div(p.n * 2 * parts, 8) <= caps.sm_count && p.kg >= 2 * parts * 256) parts *= 2;
  return parts;
}

int64_t gemm_workspace_bytes(const GemmWorkspaceQuery& q, const GemmPolicy& policy, const DeviceCaps& caps) {
  const int64_t rows = std::max(q.rows, q.routed_rows);
  // Codes (a byte a value) and their fp32 scales, plus (cuBLASLt) the weight's scales as fp32.
  int64_t bytes = rows * q.max_k + rows * (q.max_k / 128) * 4 + ceil_div(q.max_n, 128) * (q.max_k / 128) * 4;
  if (policy.numerics == Numerics::kExact) {
    bytes += 3 * (q.routed_rows * q.max_k + q.largest_fp8_weight);  // three int8 digit planes a code
  } else {
    // The fast kernel's split-K partial sums: the most a pair of the widest weight asks at any of its rows
    // (few rows split more, many rows have more of them).
    GemmProblem p;
    p.n = q.max_n;
    p.kg = q.max_k;
    p.pair = true;
    int64_t splits = 0;
    const int64_t most = std::min(rows, policy.fast_mma_max_rows);
    for (int64_t r = 1; p.n > 0 && p.kg > 0 && r <= most; r = r == most ? most + 1 : std::min(2 * r, most)) {
      p.rows = r;
      splits = std::max(splits, 4 * plan_fast_mma(p, policy, caps).workspace_floats);
    }
    bytes += splits;
    // FP4 weights widened before a wgmma call (a call of at least prewiden_min_rows rows a weight): the
    // budget, or one pair of the widest weight past it.
    const bool lt_experts = policy.cublaslt && policy.lt_experts_min_rows > 0 && rows >= policy.lt_experts_min_rows;
    const int64_t widen = std::max(policy.widen_budget_bytes, widened_bytes(2, q.max_n, q.max_k));
    if ((policy.fp4_prewiden && rows >= policy.prewiden_min_rows) || lt_experts) bytes += widen;
    if (lt_experts) {  // cuBLASLt's route: a second buffer (re-encoded a pass ahead) and the lanes' workspaces
      bytes += widen + int64_t{std::max(1, policy.lt_expert_streams) - 1} * kCublasLtWorkspaceBytes;
    }
  }
  return bytes + kCublasLtWorkspaceBytes;
}

GemmPlan plan_gemm(const GemmProblem& p, const GemmPolicy& policy, const DeviceCaps& caps) {
  DSV4_CHECK(p.groups >= 1 && p.n > 0 && p.n % p.groups == 0 && p.kg > 0 && p.rows >= 0 && p.experts >= 0,
             "plan_gemm: bad problem (n {}, groups {}, kg {}, rows {}, experts {})", p.n, p.groups, p.kg, p.rows,
             p.experts);
  if (policy.numerics == Numerics::kExact || p.exact) return exact_plan(p);
  const int64_t ng = p.n / p.groups;
  if (!block_scaled(p.weight)) {
    GemmPlan plan = exact_plan(p);
    // A bf16 weight with its FP8 form (wo_a), few rows: the few-row kernel reads the FP8 bytes, half the
    // bf16 ones, every group in one launch (the bf16 values' products, summed a scale block at a time).
    const bool twin = p.fp8_twin && p.weight == GemmWeightKind::kBf16 && p.experts == 0 && !p.pair;
    if (twin && p.rows <= policy.twin_gemv_max_rows && p.kg % 128 == 0 && ng % 128 == 0) {
      plan.route = GemmRoute::kFastPlainGemv;  // one warp a column: plain_k_parts stays 1
      return plan;
    }
    // bf16 on the tensor cores with fp32 accumulation; fp32 weights keep their fp32 sums.
    // Many rows, one group: fused multiply-add chains on the CUDA cores (fp32 weights; bf16 where
    // cuBLASLt is off or refuses).
    const bool few = p.experts == 0 && p.groups == 1 && p.rows <= policy.plain_gemv_max_rows && p.kg % 8 == 0;
    if (few && (p.weight == GemmWeightKind::kF32 || p.pair || p.n <= kPlainGemvMaxCols)) {
      plan.route = GemmRoute::kFastPlainGemv;
      plan.plain_k_parts = fast_plain_gemv_k_parts(p, caps);
      return plan;
    }
    const bool many = p.experts == 0 && p.groups == 1 && p.rows >= policy.sgemm_min_rows && p.kg % 16 == 0;
    if (many) plan.route = GemmRoute::kFastSgemm;
    // bf16 on cuBLASLt: single calls, and pairs (the compressor's, run as two) past the few-row kernel
    // (H200, 16 / 32 rows: 45.0 / 49.2 us against the exact plain kernel's 65.7 / 83.7; docs/perf.md).
    const bool lt_pair = p.pair && p.rows > policy.plain_gemv_max_rows;
    if (p.weight == GemmWeightKind::kBf16 && policy.cublaslt && p.experts == 0 && (!p.pair || lt_pair)) {
      if (plan.route == GemmRoute::kFastSgemm) plan.fallback = GemmRoute::kFastSgemm;
      plan.route = GemmRoute::kCublasLt;
    }
    return plan;
  }
  if (!fast_mma_takes(p.weight, p.kg, ng, p.groups)) return exact_plan(p);
  GemmPlan plan = plan_fast_mma(p, policy, caps);
  const bool lt_shape =
      p.weight == GemmWeightKind::kFp8 && p.experts == 0 && !p.pair && (p.groups == 1 || ng % 128 == 0);
  const bool many = p.experts > 0 ? p.rows >= policy.wgmma_min_rows * p.experts : p.rows > policy.fast_mma_max_rows;
  if (many && p.groups == 1) {
    // Many rows a weight: wgmma, without splits or workspace (and behind cuBLASLt for dense FP8); FP4
    // weights widened beforehand in passes of as many experts as the budget holds, where asked.
    plan = GemmPlan{};
    plan.route = plan.fallback = GemmRoute::kWgmma;
    plan.codes = true;
    const bool widen = policy.fp4_prewiden && p.rows >= policy.prewiden_min_rows * std::max<int64_t>(p.experts, 1);
    if (widen && p.weight == GemmWeightKind::kFp4) {
      const int64_t weights = std::max(p.experts, 1), per = widened_bytes(p.pair ? 2 : 1, p.n, p.kg);
      plan.widen_experts = static_cast<int>(std::clamp<int64_t>(policy.widen_budget_bytes / per, 1, weights));
    }
    // Many rows an expert: one cuBLASLt matmul an expert on its weights re-encoded to e4m3 (within the
    // same budget: the e4m3 form is at most the e5m2 one's bytes), wgmma behind it.
    const int64_t lt_min = p.kept ? policy.lt_kept_min_rows : policy.lt_experts_min_rows;
    const bool lt = policy.cublaslt && policy.lt_experts_min_rows > 0 && p.experts > 0 &&
                    p.weight == GemmWeightKind::kFp4 && p.rows >= lt_min * p.experts && p.n % 128 == 0;
    if (lt) {
      plan.route = GemmRoute::kCublasLtExperts;
      const int64_t per = widened_bytes(p.pair ? 2 : 1, p.n, p.kg);
      plan.lt_pass_experts = static_cast<int>(std::clamp<int64_t>(policy.widen_budget_bytes / per, 1, p.experts));
    }
  }
  if (policy.cublaslt && lt_shape && p.rows > policy.fast_mma_max_rows) plan.route = GemmRoute::kCublasLt;
  // Up to a tile of rows a weight: the few-row kernel, on the mma.sync plan where it refuses the call.
  const int64_t per_weight = p.experts > 0 ? ceil_div(p.rows, p.experts) : p.rows;
  const bool few = per_weight <= (p.experts > 0 ? policy.gemv_grouped_max_rows : policy.gemv_max_rows);
  if (few && plan.route == GemmRoute::kFastMma) {
    plan.route = GemmRoute::kFastGemv;
    plan.gemv_k_parts = policy.gemv_k_parts > 0 ? policy.gemv_k_parts : fast_gemv_k_parts(p, caps);
    plan.gemv_items = policy.gemv_items > 0 ? policy.gemv_items : fast_gemv_items(p, plan.gemv_k_parts, caps);
  }
  // A decode batch of a dense FP8 weight: the swapped wgmma kernel, the plan above behind it.
  const bool swapped = policy.wgmma_few_min_rows > 0 && p.rows >= policy.wgmma_few_min_rows &&
                       p.rows <= kWgmmaFewMaxRows && p.weight == GemmWeightKind::kFp8 && p.experts == 0 &&
                       p.groups == 1 && !p.pair && p.n % 128 == 0;
  if (swapped && (plan.route == GemmRoute::kFastGemv || plan.route == GemmRoute::kFastMma)) {
    plan.fallback = plan.route;
    plan.route = GemmRoute::kWgmmaFew;
    plan.codes = true;
    plan.few_splits = wgmma_few_splits(p, caps);
  }
  return plan;
}

int attention_blocks_per_split(int64_t ctas, int64_t blocks, int sms) {
  double best = 0;
  int64_t best_per = blocks;
  for (int64_t per = blocks; per >= 1; --per) {
    const int64_t splits = ceil_div(blocks, per);
    const int64_t waves = ceil_div(ctas * splits, int64_t{sms});
    const double cost =
        static_cast<double>(waves * (per + 1)) + (splits > 1 ? 0.5 + 0.01 * static_cast<double>(ctas * splits) : 0.0);
    if (per == blocks || cost < best) {
      best = cost;
      best_per = per;
    }
  }
  return static_cast<int>(best_per);
}

int wgmma_few_splits(const GemmProblem& p, const DeviceCaps& caps) {
  const int64_t tiles = std::max<int64_t>(1, p.n / 128), blocks = p.kg / 128;
  const int64_t fit = std::max<int64_t>(1, 2 * caps.sm_count / tiles);
  const int64_t most = std::min<int64_t>(kWgmmaFewMaxSplits, std::max<int64_t>(1, blocks / kWgmmaFewSplitBlocks));
  return static_cast<int>(std::min(fit, most));
}

}  // namespace dsv4::cuda
