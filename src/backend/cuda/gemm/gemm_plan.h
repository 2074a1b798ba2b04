// The GEMM plan: which kernel runs a GEMM, on what input form, with how many K splits and how much
// scratch, decided once per call from plain values (pure host code, tested on the CPU).
//
//   GemmProblem  the call: weight format, rows (dense, or grouped by expert), shape, pair
//   GemmPolicy   the tier and the tuning values, filled once when the backend is made and printed
//   DeviceCaps   what the plan needs to know of the GPU
//   plan_gemm    -> GemmPlan (route, tile rows, splits, workspace)
//
// Exact tier: block-scaled weights go to the exact kernels, which keep their own sub-routes (int8
// tensor cores, GEMVs, SIMT; gemm.cu); plain weights to the exact plain kernels. Fast tier: FP8 and
// FP4 weights on the FP8 tensor cores (fast_gemv.h for up to a tile of rows a weight, fast_mma.h for
// a few tiles, wgmma_gemm.h for many),
// dense FP8 GEMMs of many rows on cuBLASLt's block-scaled GEMM, bf16 weights on cuBLASLt with fp32 accumulation; fp32
// weights stay on the exact plain kernels (fp32 sums in a fixed order, as the fast tier asks).
#pragma once

#include <cstdint>
#include <string>

#include "backend/numerics.h"

namespace dsv4::cuda {

enum class GemmWeightKind : uint8_t { kFp8, kFp4, kBf16, kF32 };

// Where the indexer's dots run (indexer.h): the CUDA cores (the exact tier's kernel), mma.sync, or wgmma
// with the head sum on the tensor cores too (both: the fast tier, FP4 keys and at most 64 heads).
enum class IndexerDots : uint8_t { kCudaCores, kMmaSync, kWgmma };
const char* indexer_dots_name(IndexerDots d);

struct GemmProblem {
  GemmWeightKind weight = GemmWeightKind::kFp8;
  int64_t rows = 0;  // dense: the rows; grouped: the bound of the experts' rows
  int experts = 0;   // > 0: grouped, rows sorted by expert
  int64_t n = 0;     // output columns, every group
  int64_t kg = 0;    // K of one group
  int groups = 1;
  bool pair = false;      // a second weight of the same shape on the same rows
  bool exact = false;     // the caller needs the exact tier's bits whatever the policy
  bool fp8_twin = false;  // a bf16 weight with its FP8 form beside it (backend/weight.h)
  // Grouped FP4: the experts are kept re-encoded for cuBLASLt, or will be at this call (GemmPolicy::
  // lt_experts_resident, within the runner's budget): that route then re-encodes nothing.
  bool kept = false;
};

struct DeviceCaps {
  int sm_count = 132;
};

// The scratch of FP4 weights widened before a wgmma call or re-encoded for cuBLASLt's route, at most
// (GemmPolicy::widen_budget_bytes' default).
constexpr int64_t kWidenBudgetBytes = int64_t{256} << 20;

struct GemmPolicy {
  Numerics numerics = Numerics::kExact;
  // Fast tier: dense FP8 GEMMs of more rows than this go to cuBLASLt (where it takes the shape).
  int64_t fast_mma_max_rows = 64;
  // Fast tier: dense block-scaled calls of at most this many rows on the few-row kernel, fast_gemv.h
  // (DSV4_GEMM_FAST_GEMV_MAX_ROWS; 0: off); grouped calls of at most gemv_grouped_max_rows rows an expert
  // (their rows over their experts, rounded up; DSV4_GEMM_GEMV_GROUPED_MAX_ROWS): one tile an expert
  // mostly. 32 experts at 6 rows an expert measured 15% faster there than on the mma.sync kernel, at 12
  // 13% slower (H100, docs/perf.md).
  int64_t gemv_max_rows = 32;  // m16 / m32 measured 1.3-4x faster than mma.sync (docs/perf.md)
  int64_t gemv_grouped_max_rows = 8;
  // Fast tier, few-row kernel: runs of K a CTA's warps split (1, 2, 4 or 8); 0: the plan's rule
  // (fast_gemv_k_parts). Set only by the bench's sweep (gpu_kernels_bench gemv-parts) that checks the rule.
  int gemv_k_parts = 0;
  // Fast tier, few-row kernel: column tiles a CTA runs in turn; 0: the plan's rule (fast_gemv_items; one a
  // CTA measured 0.29 ms slower a b1 step, H100). Set by tests.
  int gemv_items = 0;
  // Fast tier, beside the GEMMs: where the indexer's dots of FP4 keys run (DSV4_INDEXER_DOTS=cuda-cores,
  // mma or wgmma; the CUDA cores measured 1.4-4x slower than mma.sync, docs/perf.md).
  IndexerDots indexer_dots = IndexerDots::kWgmma;
  // Fast tier: cuBLASLt's block-scaled FP8 and bf16 GEMMs on (DSV4_GEMM_CUBLASLT=0: off).
  bool cublaslt = true;
  // Fast tier: the wgmma kernel (wgmma_gemm.h) for grouped calls of at least wgmma_min_rows rows a
  // weight on average (DSV4_GEMM_WGMMA_MIN_ROWS), dense FP4 calls above fast_mma_max_rows rows, and
  // dense FP8 ones that cuBLASLt refuses (measured against mma.sync there: docs/perf.md).
  int64_t wgmma_min_rows = 64;
  // Fast tier, wgmma on FP4 weights: widened to e5m2 rows once per call, at most widen_budget_bytes of
  // experts at a time, instead of in shared memory by every CTA that reads them (the same bits)...
  bool fp4_prewiden = true;
  // ... for calls of at least this many rows a weight (expert) on average: widening costs a read and a
  // write of every weight the call touches, paid back by rows (H100, 32 experts: 1536 rows an expert
  // 7.69 ms against 8.54, 768 rows 4.57 against 4.52, 384 rows 3.06 against 2.42; 256 experts, 576
  // rows 30.5 against 26.9; docs/perf.md). Behind cuBLASLt's route (below) only where that refuses.
  int64_t prewiden_min_rows = 1024;
  // Fast tier: grouped FP4 calls of at least this many rows an expert on average as one cuBLASLt matmul
  // an expert, the weights re-encoded exactly to e4m3 with 128x128 block scales (gemm/lt_experts.h;
  // wgmma where a block's scales span too far or cuBLASLt refuses). DSV4_GEMM_LT_EXPERTS_MIN_ROWS; 0: off.
  // H100 MoE (its matmuls on four streams since session 36), 32 / 256 experts, this route against wgmma
  // widening in shared memory: 96 rows an expert 1.23 / 9.11 ms against 0.75 / 5.37, 192 rows 1.42 /
  // 10.58 against 1.39 / 10.39, 256 rows 1.69 / 12.54 against 1.81 / 13.43, 384 rows 1.93 / 14.5 against
  // 2.37 / 18.5 (session 40; docs/perf.md): the crossover between 192 and 256.
  int64_t lt_experts_min_rows = 224;
  // ... or, where the experts are kept re-encoded (GemmProblem::kept), this many (DSV4_GEMM_LT_KEPT_MIN_ROWS;
  // below wgmma_min_rows it is that bound). H100, 32 experts, kept against wgmma widening in shared memory:
  // 96 rows an expert 0.611 ms against 0.732, 144 rows 0.678 against 1.327, 192 rows 0.736 against 1.360
  // (session 50; docs/perf.md).
  int64_t lt_kept_min_rows = 64;
  // ... their matmuls spread over this many streams (the runner's and lt_expert_streams - 1 more, each
  // with its own cuBLASLt workspace; DSV4_GEMM_LT_EXPERT_STREAMS, 1 to 8), each expert writing only its own
  // rows (lt_expert_pieces): one expert's matmul of a few hundred rows fills a fraction of the GPU. H100,
  // four streams against one: the MoE of 2048-8192 tokens over 32 experts 1.5-7% faster, 256 experts
  // 1-8% (docs/perf.md).
  int lt_expert_streams = 4;
  // ... from weights re-encoded once and kept (every expert of a weight list, at its first call on this
  // route; DSV4_GEMM_LT_EXPERTS_RESIDENT=0: never) instead of a pass of re-encoding each call: the e4m3
  // form's bytes (twice the FP4 experts') in GPU memory for the re-encoding's time (prefill 8192 504.8 ms
  // against 527.8, decode unchanged; H100 session 49). They are optional workspace
  // (CudaOps::optional_workspace_bytes): the engine grants what its KV pools could never use, and weight
  // lists past the grant re-encode each call as without it.
  bool lt_experts_resident = true;
  // The widened or re-encoded experts a pass holds at most (bytes; tests lower it for many passes).
  int64_t widen_budget_bytes = kWidenBudgetBytes;
  // Fast tier: fp32 weights of at least this many rows on the fused multiply-add kernel (fast_sgemm.h);
  // at most plain_gemv_max_rows rows on the few-row kernel (fast_plain_gemv.h): fp32 weights, plain
  // pairs and bf16 weights of at most kPlainGemvMaxCols columns (wider ones, the head, stay on
  // cuBLASLt); the rows between on the exact plain kernels.
  int64_t sgemm_min_rows = 64;
  int64_t plain_gemv_max_rows = 8;
  // Fast tier: a bf16 weight's FP8 twin (wo_a) read by the few-row kernel up to this many rows; more on
  // cuBLASLt from the bf16 bytes (H100: twin 16.0 / 21.5 / 35.3 / 63.8 us at 1 / 2 / 4 / 8 rows,
  // cuBLASLt 27 us at each: docs/perf.md).
  int64_t twin_gemv_max_rows = 2;
  // Fast tier: dense FP8 calls of at least this many rows (and at most kWgmmaFewMaxRows) on the swapped
  // wgmma kernel (wgmma_few.h), in place of the few-row and mma.sync kernels (DSV4_GEMM_WGMMA_FEW_MIN_ROWS;
  // 0: off). Those read the weight with too few loads in flight an SM past 8 rows: H100, 32 / 64 rows, wq_b
  // 18.7 / 19.4 us against 33.0 / 34.5, wo_b 23.1 / 28.2 against 33.1 / 61.0; decode steps b16 / b32 / b64
  // -0.6 / -1.7 / -4.3 ms; from 1 or 9 rows the same at b1 and b8 (docs/perf.md).
  int64_t wgmma_few_min_rows = 9;
  // Fast tier: K splits until a call has this many CTAs per SM (each split at least kMinSplitBlocks).
  int ctas_per_sm = 2;
  // Exact tier: block sums on the int8 tensor cores (DSV4_GEMM_IMMA=0: every shape on the SIMT
  // kernels, the same bits), from imma_min_rows rows per weight (DSV4_GEMM_IMMA_MIN_ROWS).
  bool exact_imma = true;
  int64_t imma_min_rows = 64;
  // Exact tier: the plain kernels' wide row tiles keep at least this many CTAs (0: the SM count;
  // tests lower it so that small shapes take the wide tiles too).
  int64_t plain_wide_min_tiles = 0;
  // hc_pre and hc_head (hyper_connection.h), whose mix is an fp32 GEMM: the exact tier's few-token chain
  // with its products made first (DSV4_HC_PRODUCTS=0: off) or fed by a ring of product chunks
  // (DSV4_HC_RING=0: off); the sublayer's norm in the finishing kernel (off: that kernel, then
  // rms_norm; the same bits; measured 12-29% slower, docs/perf.md).
  bool hc_products = true;
  bool hc_ring = true;
  bool hc_fused_norm = true;
  // Fast tier: a sublayer boundary's hc_post and the next hc_pre as one kernel (hc_post_pre) up to this
  // many tokens (DSV4_HC_POST_PRE_MAX_TOKENS; 0: the two ops, three launches).
  // 64 (the fused kernel's most) measured 0.4-0.6 ms faster a b16-b64 step than 8 (H100, docs/perf.md).
  int64_t hc_post_pre_max_tokens = 64;
  // Sparse attention's fast path (attention_mqa.cu), from this many tokens: the entries the lists name
  // decoded once into a shadow of bf16 rows instead of by every CTA that reads them (the same bits;
  // DSV4_ATTENTION_SHADOW_MIN_TOKENS, 0: never). H100: CSA lists 11-14% faster from 2048 tokens, HCA
  // 2-6%; at 512 tokens HCA 6% slower (docs/perf.md).
  int64_t attention_shadow_min_tokens = 1024;

  // The defaults of a tier, with the DSV4_GEMM_* and DSV4_HC_* values of core/env.cpp applied.
  static GemmPolicy from_env(Numerics numerics);
  // One line for the startup summary.
  std::string describe() const;
};

// Output columns of a single bf16 call the few-row plain kernel takes (GemmPolicy::plain_gemv_max_rows).
constexpr int64_t kPlainGemvMaxCols = 4096;

// K blocks (128 wide) a split keeps at least: a few-row call is latency-bound, so splits are cheap
// (their partial sums are rows x N floats each) and more warps in flight pay.
constexpr int kMinSplitBlocks = 2;
// Partial sums the last CTA of a tile adds (tile rows x CTA columns x further splits), at most: beyond
// that, its serial loads cost more than the splits gain.
constexpr int64_t kMaxSplitReduce = 8192;

// The fast kernel's limits: K of one group at most kFastMmaMaxK (its activation scales sit in shared
// memory); output columns a CTA for a row tile (tall tiles hold fewer columns in registers).
constexpr int64_t kFastMmaMaxK = 16384;
constexpr int64_t fast_mma_cta_cols(int tile_rows) { return tile_rows >= 32 ? 128 : 256; }
// Bytes of one row of activation codes over nk K blocks kept in shared memory (padded so that a
// fragment load's eight rows fall in distinct banks: 32-bit loads for FP8, 64-bit for FP4), and the
// most a CTA keeps: the tile's codes for its split stay resident when they fit.
constexpr int64_t fast_mma_resident_pitch(GemmWeightKind k, int64_t nk) {
  return nk * 128 + (k == GemmWeightKind::kFp8 ? 16 : 32);
}
constexpr int64_t kFastMmaResidentBytes = 48 << 10;

// Whether the fast kernel takes weights of this kind and shape: FP8 or FP4, K % 128 == 0 and at most
// kFastMmaMaxK, FP8 groups of whole 128-row scale blocks.
bool fast_mma_takes(GemmWeightKind kind, int64_t kg, int64_t ng, int groups);

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The GEMM runner's device scratch for a step (GemmRunner: activation codes and scales, split-K
// partial sums, the exact tier's int8 digit planes, cuBLASLt's workspace), given the step's rows,
// the MoE's routed rows (tokens x top-k), the widest K and N of its block-scaled weights and the
// largest FP8 weight's elements (the exact tier's tensor-core kernel splits it into digit planes).
struct GemmWorkspaceQuery {
  int64_t rows = 0;
  int64_t routed_rows = 0;
  int64_t max_k = 0;
  int64_t max_n = 0;
  int64_t largest_fp8_weight = 0;
};
int64_t gemm_workspace_bytes(const GemmWorkspaceQuery& q, const GemmPolicy& policy, const DeviceCaps& caps);

// cuBLASLt's workspace a runner keeps.
constexpr int64_t kCublasLtWorkspaceBytes = int64_t{32} << 20;

// Row tiles of tm rows a launch needs: dense, ceil(rows / tm); grouped (experts > 0), every expert's
// tiles, at most rows/tm plus one partial tile per non-empty expert, of which there are at most
// min(experts, rows). A decode step's few routed rows then launch a few tiles, not one per expert.
inline int64_t row_tiles(int64_t rows, int64_t tm, int64_t experts) {
  const int64_t partial = experts > 0 ? (experts < rows ? experts : rows) : 0;
  return ceil_div(rows + partial * (tm - 1), tm);
}

enum class GemmRoute : uint8_t {
  kExactBlock,       // the exact block-scaled kernels (their own sub-routes)
  kExactPlain,       // the exact plain (bf16 / fp32 weight) kernels
  kCublasLt,         // cuBLASLt: block-scaled FP8 or bf16 with fp32 accumulation
  kFastMma,          // fast_mma.h
  kWgmma,            // wgmma_gemm.h
  kFastSgemm,        // fast_sgemm.h (fp32 weights)
  kFastGemv,         // fast_gemv.h (few rows a weight; fallback: kFastMma's plan)
  kFastPlainGemv,    // fast_plain_gemv.h (few rows, fp32 weights or a plain pair)
  kCublasLtExperts,  // lt_experts.h: a cuBLASLt matmul an expert (fallback: kWgmma's plan)
  kWgmmaFew,         // wgmma_few.h (dense FP8, a decode batch; fallback: the few-row or mma.sync plan it keeps)
};
const char* route_name(GemmRoute r);

struct GemmPlan {
  GemmRoute route = GemmRoute::kExactBlock;
  GemmRoute fallback = GemmRoute::kExactBlock;  // where cuBLASLt refuses a shape at run time
  bool codes = false;                           // the input is quantized first (quantize_act)
  int tile_rows = 0;                            // kFastMma: 8, 16 or 32
  int splits = 1;                               // kFastMma: K splits
  bool resident = false;                        // kFastMma: the tile's activation codes stay in shared memory
  int64_t workspace_floats = 0;                 // kFastMma: fp32 scratch of the splits
  int64_t workspace_counters = 0;               // kFastMma: the splits' arrival counters (zeroed once)
  int gemv_k_parts = 1;                         // kFastGemv: runs of K a CTA's warps split (1, 2, 4, 8)
  int gemv_items = 1;                           // kFastGemv: column tiles a CTA runs in turn
  int plain_k_parts = 1;                        // kFastPlainGemv: warps a column's K is split over (1, 2, 4, 8)
  int widen_experts = 0;    // kWgmma, FP4: weights (experts) widened a pass, their scratch within the widening budget
  int lt_pass_experts = 0;  // kCublasLtExperts: experts re-encoded a pass, within the widening budget
  int few_splits = 1;       // kWgmmaFew: K splits, one thread-block cluster a 128-row weight tile
};

// kWgmmaFew's limits: rows (wgmma's N, 16 / 32 / 64), K splits (a portable cluster) and the K blocks a split
// keeps at least (a CTA's ramp and merge cost about a few blocks' loads: shared_w2's 16 blocks in eight
// splits of two ran at 21-23% of copy BW, H100).
constexpr int64_t kWgmmaFewMaxRows = 64;
constexpr int kWgmmaFewMaxSplits = 8;
constexpr int kWgmmaFewSplitBlocks = 4;

// kWgmmaFew: the K splits of a call, as many as keep its 128-row tiles within one wave of two CTAs an SM,
// each split at least kWgmmaFewSplitBlocks blocks, at most kWgmmaFewMaxSplits.
int wgmma_few_splits(const GemmProblem& p, const DeviceCaps& caps);

// Sparse attention's fast path (attention_mqa.cu): 64-entry blocks a CTA takes of a list of `blocks`, for
// `ctas` (token, head group) items on `sms` SMs (one CTA an SM), by a cost model in units of one block's
// time: waves of `sms` CTAs, each costing its blocks plus about one block for the queries and the epilogue;
// a split list adds the combine (a launch, and reading every partial state back). Bounded to one or two
// splits it measured slower (H100, b1 8K +2.1 / +0.6 ms a step; docs/perf.md).
int attention_blocks_per_split(int64_t ctas, int64_t blocks, int sms);

// kCublasLtExperts: the matmuls of one expert of `rows` rows. cuBLASLt's block-scaled GEMM takes row
// counts that are multiples of 4, and the experts' matmuls run on several streams, so an expert of at
// least 4 rows writes only its own: its rows rounded down to 4, then (rows % 4) its last four rows, a
// second matmul on the same stream after the first. An expert of 1-3 rows multiplies 4 and writes past
// its rows, which the next experts' matmuls write again: those run first, on one stream in ascending
// order, before the streams fork. A piece's rows start at `first` (from the expert's first row); its
// regrouped activation scales, [kblocks][rows], start `scale_offset` floats into the expert's block
// (lt_experts.h), which has room for kblocks x (rows + 4).
struct LtPiece {
  int64_t first = 0;
  int64_t rows = 0;
  int64_t scale_offset = 0;
};
struct LtPieces {
  LtPiece piece[2];
  int count = 0;
};
constexpr LtPieces lt_expert_pieces(int64_t rows, int64_t kblocks) {
  LtPieces p;
  if (rows <= 0) return p;
  if (rows < 4) {
    p.piece[p.count++] = {0, 4, 0};
    return p;
  }
  const int64_t body = rows / 4 * 4;
  p.piece[p.count++] = {0, body, 0};
  if (body < rows) p.piece[p.count++] = {rows - 4, 4, kblocks * body};
  return p;
}

// Bytes of `weights` FP4 weights of n x kg widened: e5m2 codes and an fp32 scale a row's 128-wide block.
constexpr int64_t widened_bytes(int64_t weights, int64_t n, int64_t kg) { return weights * n * (kg + kg / 128 * 4); }

// kFastGemv: the K runs a CTA's eight warps split, doubled while each run keeps four K blocks and the
// call's warps (16 weight rows x a run each) still fit one wave of two CTAs an SM (grouped calls: four
// waves, measured faster for the MoE's few routed rows).
int fast_gemv_k_parts(const GemmProblem& p, const DeviceCaps& caps);

// kFastGemv: the weight blocks in flight a warp (fast_gemv.cu's ring).
constexpr int kFastGemvDepth = 4;

// kFastGemv: column tiles a CTA runs in turn, so that a call of more CTAs than one wave of two an SM (the
// MoE's few routed rows, split into short K runs by fast_gemv_k_parts) runs as one wave of longer ones:
// a tile search, an activation staging and a pipeline ramp a CTA instead of one a tile. Calls split into
// K runs only (whole-K warps are long already), of one group, each run a multiple of kFastGemvDepth
// blocks (a tile starts at the ring's first slot); else 1.
int fast_gemv_items(const GemmProblem& p, int k_parts, const DeviceCaps& caps);

// kFastPlainGemv: the warps a column's K is split over, doubled while one weight's CTAs (eight warps)
// still fit one an SM and each warp keeps at least one 256-wide K slice (a twin: 1). Narrow calls (the
// MoE gate's 32-256 columns, weights_proj's 64) otherwise run on 4-32 SMs, each lane with several
// dependent loads.
int fast_plain_gemv_k_parts(const GemmProblem& p, const DeviceCaps& caps);

// The fast kernel's tile and split choice for a problem (route kFastMma).
GemmPlan plan_fast_mma(const GemmProblem& p, const GemmPolicy& policy, const DeviceCaps& caps);

GemmPlan plan_gemm(const GemmProblem& p, const GemmPolicy& policy, const DeviceCaps& caps);

}  // namespace dsv4::cuda
