// The parameters of every op of the Ops interface (backend/ops.h), one plain struct each, and the op
// list written once (DSV4_FOR_EACH_OP). Both backends take these structs directly: the CUDA launchers
// too, so this header and what it includes stay free of fmt/spdlog and compile under nvcc.
//
// The ops are the coarse operations DeepSeek-V4 is built from (MODEL.md §2-§6), plus paged_slots,
// the one index op that long contexts need on the device, each taking a plain struct of pointers and
// sizes. Pointers are host memory for the CPU backend and device memory for the CUDA backend; arrays
// of views (Weight[], expert lists) are host arrays.
//
// Conventions shared by every op:
//  * Tensors are dense and row-major unless a stride is given. Activations crossing op boundaries are
//    bf16 (uint16_t storage); fp32 where the reference keeps fp32 (HC mix/post/comb, compressor
//    state, gate scores and weights, logits). "bf16(v)" = round to nearest even.
//  * Each op reproduces the reference's rounding and quantization points exactly; in the exact tier
//    only summation order inside fp32 reductions is backend-specific (the fast tier, spec/NUMERICS.md,
//    forms sums as tensor cores do). The CPU backend fixes that order per output
//    element, independent of the batch, of other rows and of the thread count (batch-invariant and
//    bit-reproducible run to run).
//  * Discrete choices (indexer top-k, MoE top-k) order by value and break ties by the LOWER index.
//    Every backend must do the same.
//  * Invalid parameters throw dsv4::Error before anything is written: Ops checks them
//    (backend/op_checks.h) before it hands them to a backend. Index contents (slots, expert and
//    token ids) are checked where read: the CPU backend throws on a slot outside a table's capacity
//    or an unknown id.
//  * Slots address EntryTables (core/kv_entry.h); −1 means "no entry" where the op says so.
//  * An Ops object runs one op at a time (it owns its scratch memory); ops may be called from any
//    single thread.
//  * Outputs never alias inputs unless the op says so.
#pragma once

#include <cstdint>

#include "backend/rope_config.h"
#include "backend/sampling_math.h"
#include "backend/weight.h"
#include "core/kv_entry.h"
#include "core/model_config.h"

namespace dsv4 {

enum class ActType : uint8_t { kBF16, kF32 };

// y[m, n] = Σ_k x[m, k] · W[n, k]  (MODEL.md §9.3). W is [N = out, K = in].
//  * FP8 weight: x is quantized per row in 1×128 K-blocks to e4m3 with a ue8m0 scale
//    (s = 2^ceil(log2(max(amax, 1e-4)·fp32(1/448)))); per K-block the fp32 product P of the codes
//    is added as C += P · (sa[m][kb] · sb[n/128][kb]). Needs K % 128 == 0.
//  * FP4 weight: x as above; per 32-block: C += (P · sa[m][k/128]) · sb[n][k/32]. Needs K % 128 == 0.
//  * bf16 / f32 weight: plain fp32 GEMM of the widened values (true fp32, no activation quantization).
//  * Output: bf16(C) or fp32 C.
//  * groups > 1 (the grouped wo_a): x holds `groups` equal K-slices and W `groups` equal row slices;
//    output column n uses slice n / (N/groups) of x and row n of W, whose cols = K/groups.
struct LinearParams {
  const uint16_t* x = nullptr;  // [rows, K] bf16, row stride x_stride (0 = K)
  int64_t rows = 0;
  Weight w{};         // [N, K/groups]
  void* y = nullptr;  // [rows, N] of y_type, row stride y_stride (0 = N)
  ActType y_type = ActType::kBF16;
  int groups = 1;
  int64_t x_stride = 0;
  int64_t y_stride = 0;
};

// y = bf16(w · (x · (1/sqrt(mean(x²) + eps)))) per row, fp32 (RMSNorm module, §2.5). y may equal x.
struct RmsNormParams {
  const uint16_t* x = nullptr;       // [rows, dim] bf16
  uint16_t* y = nullptr;             // [rows, dim] bf16
  const uint16_t* weight = nullptr;  // [dim] bf16 (the checkpoint's dtype; exact in fp32)
  int64_t rows = 0;
  int64_t dim = 0;
  float eps = 1e-6f;
};

// Per-head query RMS without weight, every step a bf16 op (§5.2), in place:
// sq = bf16(q²); m = bf16(Σ sq / d); v = bf16(m + eps); r = bf16(1/sqrt(v)); q = bf16(q · r).
// With positions set, the forward RoPE of the queries follows in the same pass (= a rope() call).
struct HeadRmsNormParams {
  uint16_t* x = nullptr;  // [rows, heads, head_dim] bf16
  int64_t rows = 0;
  int heads = 0;
  int head_dim = 0;
  float eps = 1e-6f;
  const int32_t* positions = nullptr;  // [rows], or null: no RoPE
  RopeConfig rope{};
};

// RoPE on the last rope.rope_dim dims of every head, in place (§5.3): pair i = (x[2i], x[2i+1]) of
// that slice, angle = fp32(position) · f_i with f_i = rope_frequencies(rope), cos/sin in fp32;
// forward re' = re·cos − im·sin, im' = re·sin + im·cos; inverse uses −sin; result bf16.
struct RopeParams {
  uint16_t* x = nullptr;  // [rows, heads, head_dim] bf16
  int64_t rows = 0;
  int heads = 1;
  int head_dim = 0;
  const int32_t* positions = nullptr;  // [rows], 0 <= p < 2^24 (fp32-exact)
  RopeConfig rope{};
  bool inverse = false;
};

// Hadamard rotation of each row in place (§2.4): x = bf16(dim^-½ · H_dim · x), H the Sylvester
// matrix, computed in fp32 with one rounding. dim is a power of two. With fp4_after, x = Q4 of that
// (quant_sim kFp4, 32-blocks): the index vectors' Q4(Had(x)) of §5.6 in one pass.
struct HadamardParams {
  uint16_t* x = nullptr;  // [rows, dim] bf16
  int64_t rows = 0;
  int dim = 0;
  bool fp4_after = false;
};

// Quantize-dequantize simulation in place: kFp8 = Q8(x, block) (§2.2, block 64 for KV nope,
// 128 for activations), kFp4 = Q4(x) (§2.3, block 32). Acts on cols [0, cols) of each row.
enum class QuantSim : uint8_t { kFp8, kFp4 };
struct QuantSimParams {
  uint16_t* x = nullptr;  // rows of row_stride bf16 elements (0 = cols)
  int64_t rows = 0;
  int64_t cols = 0;  // a multiple of block
  int64_t row_stride = 0;
  QuantSim kind = QuantSim::kFp8;
  int block = 64;  // kFp8 only; kFp4 always uses 32
};

// Writes bf16 rows into a table through the entry codec (core/kv_entry.h). Quantizing formats
// quantize as the reference's simulation does, so rows already on that grid are stored exactly
// (apply QuantSim first when the reference does, e.g. Q8 on the KV nope dims).
struct StoreEntriesParams {
  const uint16_t* x = nullptr;  // [rows, dim] bf16
  int64_t rows = 0;
  KvEntryDims dims{};  // dim, rope_dim (attn-fp8)
  EntryTable table{};
  const int32_t* slots = nullptr;  // [rows]; −1 = skip the row
};

// The shared K=V head into the window, fused (§5.4): per row, kv = bf16(RMSNorm(x, norm_weight)), RoPE
// on its last rope_dim dims at positions[r] → bf16, Q8(kv[0:dim−rope_dim], 64), then stored through the
// table's codec at slots[r] (−1 = skip). Equal to rms_norm, rope, quant_sim and store_entries in turn.
struct KvInsertParams {
  const uint16_t* x = nullptr;  // [rows, dim] bf16 (the wkv output)
  int64_t rows = 0;
  KvEntryDims dims{};                     // dim, rope_dim
  const uint16_t* norm_weight = nullptr;  // [dim] bf16
  float eps = 1e-6f;
  const int32_t* positions = nullptr;  // [rows]
  RopeConfig rope{};
  EntryTable table{};
  const int32_t* slots = nullptr;  // [rows]
};

// Sparse attention with sink (§5.7), one shared K=V entry per index. For query t, the index list is
// L = window_slots[t][0..window_width) ++ compressed_slots[t][0..compressed_width); −1 = no entry.
// Per head h, walking L in positional blocks of 64 (blocks with no entry change nothing):
//   s_i = (q_h · k_i) · softmax_scale  (fp32 sum of bf16 products)
//   M' = max(M, max_i s_i);  α = exp(M − M');  l = l·α + Σ_i exp(s_i − M')
//   acc = acc·α + Σ_i bf16(exp(s_i − M')) · v_i
// and finally l += exp(sink[h] − M); out = bf16(acc / l) (0 when L has no entry at all).
// The 64-blocks are positional, so to match the reference bit for bit lay L out as it does. Window:
// prefill (S tokens from 0) width min(S, W), row t = max(0, t−W+1)+j with −1 where that exceeds t;
// decode width W, ring order oldest → newest (−1 for never-written slots). Compressed: ratio 128
// prefill width S/128, row t = j with −1 where j ≥ (t+1)/128; decode width (p+1)/128 ascending;
// ratio 4: the indexer's top-k row. With positions set, the output's inverse RoPE follows in the same
// pass (= rope(out, inverse) on the bf16 output: the reference's o → inverse RoPE → bf16 feeding wo_a).
struct SparseAttentionParams {
  const uint16_t* q = nullptr;  // [tokens, heads, head_dim] bf16, normed and roped
  // Or, instead of q, the queries as wq_b made them: the op first applies head_rms_norm's Q-norm (eps
  // q_norm_eps) and RoPE (positions, rope) to each head, the same bits, and attends with those; a backend
  // may do that in its query load (CUDA's shadow kernel does). Its contents afterwards are unspecified.
  uint16_t* q_unnormed = nullptr;
  float q_norm_eps = 0;
  uint16_t* out = nullptr;  // [tokens, heads, head_dim] bf16
  int64_t tokens = 0;
  int heads = 0;
  int head_dim = 0;
  int rope_dim = 0;             // for decoding attn-fp8 entries
  const float* sink = nullptr;  // [heads]
  float softmax_scale = 0;      // head_dim^-½
  EntryTable window{};
  const int32_t* window_slots = nullptr;  // [tokens, window_width]
  int32_t window_width = 0;
  EntryTable compressed{};
  const int32_t* compressed_slots = nullptr;  // [tokens, compressed_width]; may be null when width 0
  int32_t compressed_width = 0;
  const int32_t* positions = nullptr;  // [tokens] for the fused inverse RoPE, or null
  RopeConfig rope{};
};

// Compressor, step half (§5.5): for each token p, a_p = fp32(x_p)·wkvᵀ and g_p = fp32(x_p)·wgateᵀ +
// ape[pos_p mod ratio] (true fp32 GEMMs), stored as one fp32 state row [a (c·d_c) | g (c·d_c)], c = 2
// when ratio == 4 (overlap) else 1. The state table has format kF32 and dim 2·c·d_c. Rows written by
// one call are what a later compressor_emit reads: run step for all tokens of a forward first, with
// distinct slots. Decode can keep a ring of c·ratio rows per sequence (slot = pos mod c·ratio); a
// prefill chunk needs a row for each of its positions that a block it completes will pool.
struct CompressorStepParams {
  const uint16_t* x = nullptr;  // [tokens, dim] bf16
  int64_t tokens = 0;
  int64_t dim = 0;
  const int32_t* positions = nullptr;  // [tokens]
  Weight wkv{};                        // [c·d_c, dim], bf16 or f32 (computed in fp32)
  Weight wgate{};                      // [c·d_c, dim]
  const float* ape = nullptr;          // [ratio, c·d_c]
  int ratio = 0;                       // 4 or 128
  int head_dim = 0;                    // d_c
  EntryTable state{};
  const int32_t* state_slots = nullptr;  // [tokens]; −1 = do not store
};

// Compressor, emit half (§5.5): pools one entry per item and stores it. For each channel ch < d_c the
// candidates are, in this order:
//   overlap (ratio 4): the 4 previous-block rows, value a[ch] and score g[ch] (slot −1 = absent, i.e.
//     score −∞: entry 0, or a fresh sequence), then the 4 current-block rows, a[d_c+ch] / g[d_c+ch];
//   otherwise: the `ratio` current-block rows, a[ch] / g[ch]  (current rows must all be present);
// m = max g; x_r = exp(g_r − m); Σ = Σ_r x_r; e[ch] = Σ_r (x_r / Σ) · a_r, fp32, sums in list order.
// Then e = RMSNorm(bf16(e)) → bf16, RoPE(e[d_c−r:], position block_index·ratio) → bf16, and
// attention entries: Q8(e[0:d_c−r], 64); indexer keys (indexer = true): bf16(Had(e)) then Q4.
// The result is stored through the codec of the output table (exact for its grid).
struct CompressorEmitParams {
  int64_t entries = 0;
  // [entries] i: the entry covers tokens [i·ratio, (i+1)·ratio); −1 = no entry (the item is skipped,
  // its rows and slot are not read): fixed-size emission lists of padded decode steps.
  const int32_t* block_index = nullptr;
  const int32_t* rows = nullptr;  // [entries, c·ratio] state slots (previous block first)
  EntryTable state{};
  int ratio = 0;
  int head_dim = 0;  // d_c
  int rope_dim = 0;
  const uint16_t* norm_weight = nullptr;  // [d_c] bf16
  float norm_eps = 1e-6f;
  RopeConfig rope{};
  bool indexer = false;
  EntryTable out{};
  const int32_t* out_slots = nullptr;  // [entries]; −1 = compute but do not store
};

// Indexer scores and top-k (§5.6). For query t of sequence s = token_seq[t], entry j is eligible iff
// j < min(key_count[s], floor((positions[t] + 1) / ratio)). With w_h = bf16(weights[t][h] ·
// weight_scale) (the reference's bf16 tensor × fp32 constant):  s_hj = bf16(q_h · K_j) (fp32 sum);  score_j = bf16(Σ_h
// bf16(relu(s_hj) · w_h)) (fp32 sum in head order). Output: the min(topk, eligible) best j by score descending, ties →
// lower j, then −1 up to topk. Optionally also their slots: out_slots[t][r] = slot_map[s·key_stride + j].
struct IndexerTopkParams {
  const uint16_t* q = nullptr;        // [tokens, heads, head_dim] bf16 (RoPE'd, Had, Q4)
  const uint16_t* weights = nullptr;  // [tokens, heads] bf16, the raw weights_proj output
  float weight_scale = 0;             // index_head_dim^-½ · heads^-½
  int64_t tokens = 0;
  int heads = 0;
  int head_dim = 0;
  const int32_t* positions = nullptr;  // [tokens]
  int ratio = 4;
  const int32_t* token_seq = nullptr;  // [tokens] in [0, sequences); null = every token is sequence 0
  int64_t sequences = 1;
  EntryTable keys{};
  const int32_t* key_slots = nullptr;  // [sequences, key_stride]: slot of key j of sequence s
  int32_t key_stride = 0;
  const int32_t* key_count = nullptr;  // [sequences] keys stored
  int topk = 0;
  int32_t* out_index = nullptr;       // [tokens, topk]
  const int32_t* slot_map = nullptr;  // optional [sequences, key_stride] (e.g. compressed KV slots)
  int32_t* out_slots = nullptr;       // optional [tokens, topk], with slot_map
};

// Hyper-connection pre (§4.1-§4.2): X = fp32(h) [hc·dim]; rs = 1/sqrt(mean(X²) + norm_eps);
// mix = (X·fnᵀ)·rs (true fp32); pre_j = sigmoid(mix_j·scale0 + base_j) + hc_eps;
// post_j = 2·sigmoid(mix_{hc+j}·scale1 + base_{hc+j}); comb = Sinkhorn(mix_{2hc+4j+k}·scale2 + base):
// row softmax + eps, column norm, then (iters−1)× (row norm, column norm), each x/(Σ + eps);
// x = bf16(Σ_j pre_j · X_j). With out_norm, x is then the sublayer's RMSNorm of that row, as rms_norm
// computes it (the same bits as an rms_norm call on x; one pass on the device).
struct HcPreParams {
  const uint16_t* h = nullptr;  // [tokens, hc, dim] bf16
  int64_t tokens = 0;
  int hc = 4;
  int64_t dim = 0;
  const float* fn = nullptr;     // [(2+hc)·hc, hc·dim]
  const float* scale = nullptr;  // [3]
  const float* base = nullptr;   // [(2+hc)·hc]
  float norm_eps = 1e-6f;
  float hc_eps = 1e-6f;
  int sinkhorn_iters = 20;
  uint16_t* x = nullptr;               // [tokens, dim] bf16
  float* post = nullptr;               // [tokens, hc]
  float* comb = nullptr;               // [tokens, hc, hc], comb[j][k]: source stream j → destination k
  const uint16_t* out_norm = nullptr;  // optional [dim] bf16: RMSNorm weight applied to x
  float out_norm_eps = 1e-6f;
};

// Hyper-connection post (§4.3): out[k] = bf16(post_k · x + Σ_j comb[j][k] · res_j) in fp32 (the sum
// over j first, in order). out may equal residual.
struct HcPostParams {
  const uint16_t* x = nullptr;         // [tokens, dim] bf16
  const uint16_t* residual = nullptr;  // [tokens, hc, dim] bf16
  const float* post = nullptr;         // [tokens, hc]
  const float* comb = nullptr;         // [tokens, hc, hc]
  uint16_t* out = nullptr;             // [tokens, hc, dim] bf16
  int64_t tokens = 0;
  int hc = 4;
  int64_t dim = 0;
};

// A sublayer's hc_post, then the next sublayer's hc_pre on the streams it wrote (pre.h == post.out):
// what every sublayer boundary runs, one op so that a backend may fuse the two (the CUDA fast tier:
// one launch instead of three at decode). Each part as its own op defines it.
struct HcPostPreParams {
  HcPostParams post;
  HcPreParams pre;
};

// Final hyper-connection head (§4.4): mix = (X·fnᵀ)·rs; pre_j = sigmoid(mix_j·scale0 + base_j) + hc_eps;
// y = bf16(Σ_j pre_j · X_j).
struct HcHeadParams {
  const uint16_t* h = nullptr;  // [tokens, hc, dim] bf16
  int64_t tokens = 0;
  int hc = 4;
  int64_t dim = 0;
  const float* fn = nullptr;     // [hc, hc·dim]
  const float* scale = nullptr;  // [1]
  const float* base = nullptr;   // [hc]
  float norm_eps = 1e-6f;
  float hc_eps = 1e-6f;
  uint16_t* y = nullptr;               // [tokens, dim] bf16
  const uint16_t* out_norm = nullptr;  // optional [dim] bf16: the final RMSNorm applied to y (as hc_pre's)
  float out_norm_eps = 1e-6f;
};

// MoE gate (§6.1): z = fp32(x)·fp32(W)ᵀ; s = sqrt(softplus(z)) (threshold 20), sigmoid(z) or
// softmax(z); experts: tid2eid[token_id] (hash layers) or top-k of s + bias (bias may be null;
// descending, ties → lower expert); weights = s[e] / Σ s (not for softmax) · route_scale, the sum
// taken in output order.
struct MoeGateParams {
  const uint16_t* x = nullptr;  // [tokens, dim] bf16
  int64_t tokens = 0;
  int64_t dim = 0;
  Weight weight{};                     // [experts, dim] bf16 (or f32), computed in fp32
  const float* bias = nullptr;         // [experts] selection-only bias, or null
  const int32_t* tid2eid = nullptr;    // [vocab, topk] hash routing table, or null
  const int32_t* token_ids = nullptr;  // [tokens], hash routing only
  int64_t vocab = 0;
  int experts = 0;
  int topk = 0;
  ScoreFunc score_func = ScoreFunc::kSqrtSoftplus;
  float route_scale = 1;
  int32_t* indices = nullptr;  // [tokens, topk]
  float* weights = nullptr;    // [tokens, topk]
};

// MoE experts and combine (§6.2-§6.3). Per expert: g = fp32(w1(x)), u = fp32(w3(x)) (bf16 linears);
// routed only: u = clamp(u, ±limit), g = min(g, limit) (limit > 0); a = silu(g)·u; routed: a = w·a;
// y_e = w2(bf16(a)). Y = Σ over experts in ascending order of fp32(y_e), then + fp32(shared(x));
// out = bf16(Y). Routed experts are FP4 or FP8 weights; the shared expert FP8.
struct MoeExpertsParams {
  const uint16_t* x = nullptr;  // [tokens, dim] bf16
  int64_t tokens = 0;
  int64_t dim = 0;
  int64_t inter_dim = 0;
  const int32_t* indices = nullptr;  // [tokens, topk] from the gate (distinct per row)
  const float* weights = nullptr;    // [tokens, topk]
  int topk = 0;
  int experts = 0;
  const Weight* w1 = nullptr;  // [experts] views, each [inter_dim, dim]
  const Weight* w3 = nullptr;  // [experts] views, each [inter_dim, dim]
  const Weight* w2 = nullptr;  // [experts] views, each [dim, inter_dim]
  Weight shared_w1{};
  Weight shared_w3{};
  Weight shared_w2{};
  float swiglu_limit = 0;  // routed experts only; 0 = no clamp
  uint16_t* y = nullptr;   // [tokens, dim] bf16
  // The shared expert's output [tokens, dim] from shared_expert (same weights and x), or null: the
  // op computes it. shared_on_side: it was made on the device's side queue, which the op joins only
  // right before adding it, so the routed experts run beside it.
  const uint16_t* shared_y = nullptr;
  bool shared_on_side = false;
};

// Routed experts pair by pair, for experts split across ranks (model/parallel_layout.h): a pair
// q = t·topk + k is token t's k-th routed expert e = indices[q]. Pairs whose expert has no weights here
// (its view's data is null: another rank owns it) are skipped, their out rows left as they are.
//  kUp:   out[q] = bf16(weights[q] · swiglu(w1_e(in[t]), w3_e(in[t])))  in [tokens, in_dim], out [pairs, out_dim]
//  kDown: out[q] = w2_e(in[q])                                           in [pairs, in_dim], out [pairs, out_dim]
// w1/w3 (kUp) and w2 (kDown) may be a rank's rows of the experts (out_dim of them). Row for row what
// moe_experts computes for the pair; moe_combine then sums the pairs as moe_experts does.
enum class MoeStage : uint8_t { kUp, kDown };
struct MoePairsParams {
  MoeStage stage = MoeStage::kUp;
  const uint16_t* in = nullptr;  // bf16, rows as above
  int64_t in_dim = 0;
  int64_t tokens = 0;
  const int32_t* indices = nullptr;  // [tokens, topk] (distinct per row)
  const float* weights = nullptr;    // [tokens, topk]; kUp only
  int topk = 0;
  int experts = 0;
  const Weight* w1 = nullptr;  // kUp: [experts] views [out_dim, in_dim]
  const Weight* w3 = nullptr;  // kUp: [experts] views [out_dim, in_dim]
  const Weight* w2 = nullptr;  // kDown: [experts] views [out_dim, in_dim]
  float swiglu_limit = 0;      // kUp; 0 = no clamp
  uint16_t* out = nullptr;     // [tokens·topk, out_dim] bf16
  int64_t out_dim = 0;
};

// moe_experts' combine over pair rows (§6.3): y[t] = bf16(Σ fp32(pairs[t·topk+k]) over k in ascending order
// of indices[t][k], from 0, + fp32(shared_y[t])): bit for bit moe_experts when pairs hold its y_e.
struct MoeCombineParams {
  const uint16_t* pairs = nullptr;     // [tokens·topk, dim] bf16
  const int32_t* indices = nullptr;    // [tokens, topk] (distinct per row)
  const uint16_t* shared_y = nullptr;  // [tokens, dim] bf16
  int64_t tokens = 0;
  int topk = 0;
  int64_t dim = 0;
  uint16_t* y = nullptr;  // [tokens, dim] bf16
};

// The shared expert alone (the unrouted half of MoeExpertsParams): y = w2(bf16(silu(g)·u)) with
// g = fp32(w1(x)), u = fp32(w3(x)), bf16 out; bit for bit what moe_experts adds.
struct SharedExpertParams {
  const uint16_t* x = nullptr;  // [tokens, dim] bf16
  int64_t tokens = 0;
  int64_t dim = 0;
  int64_t inter_dim = 0;
  Weight w1{};            // [inter_dim, dim]
  Weight w3{};            // [inter_dim, dim]
  Weight w2{};            // [dim, inter_dim]
  uint16_t* y = nullptr;  // [tokens, dim] bf16
};

// SwiGLU, the experts' activation between their w1/w3 and w2 GEMMs (§6.2), per element of row r in
// fp32 and in this order: with limit > 0, g = min(g, limit) and u = clamp(u, ±limit); a = (g / (1 +
// exp(−g))) · u; with weights, a = weights[r] · a; out = bf16(a). moe_experts and shared_expert run
// this step inside; as an op it serves a caller that makes g and u itself. out may equal g or u.
struct SwigluParams {
  const uint16_t* g = nullptr;  // [rows, dim] bf16, the w1 output
  const uint16_t* u = nullptr;  // [rows, dim] bf16, the w3 output
  int64_t rows = 0;
  int64_t dim = 0;
  float limit = 0;                 // the routed experts' swiglu_limit; 0 = no clamp
  const float* weights = nullptr;  // [rows] routing weights, or null: none (the shared expert)
  uint16_t* out = nullptr;         // [rows, dim] bf16
};

// out[t, c, :] = table[ids[t], :] for each of `copies` streams (the hc broadcast).
struct EmbedParams {
  const int32_t* ids = nullptr;  // [tokens], each in [0, vocab)
  int64_t tokens = 0;
  const uint16_t* table = nullptr;  // [vocab, dim] bf16
  int64_t vocab = 0;
  int64_t dim = 0;
  int copies = 1;
  uint16_t* out = nullptr;  // [tokens, copies, dim] bf16
};

// out[i] = in[index[i]] for rows of `width` bytes of any element type: a selection or permutation of
// rows, copied as they are (the expert-parallel dispatch gathers its pairs' token rows, then its tokens'
// pair rows back into pair order).
struct GatherRowsParams {
  const void* in = nullptr;  // [in_rows, width bytes]
  int64_t in_rows = 0;
  const int32_t* index = nullptr;  // [rows], each in [0, in_rows)
  int64_t rows = 0;
  int64_t width = 0;    // bytes a row
  void* out = nullptr;  // [rows, width bytes]
};

// Which page of one layer each block of a paged cache's unit uses, in device memory: block b
// (first_block <= b < first_block + blocks) uses pages[(b − first_block)·layers + layer]. One block list
// then serves every layer of the unit, each reading it through its own map.
struct BlockPageMap {
  const int32_t* pages = nullptr;  // null: no map (list entries are pages)
  int32_t first_block = 0;
  int32_t blocks = 0;
  int32_t layers = 1;
  int32_t layer = 0;
};

// Long runs of slots from page lists, resolved where the ops run, so that a long context costs the
// host one lookup per page instead of one per item (the paged cache's block tables, vLLM-style).
// List k covers items from base[k] (a multiple of per_page) on: item i sits at slot
// page(pages[k·page_stride + (i − base[k]) / per_page])·per_page + i mod per_page, where page() is
// the identity, or with map.pages the block's page through `map` (a −1 entry or page: not resident).
// Row r lists items first[r] .. first[r] + count[r] − 1 of list list[r], then −1 up to width.
// With list_row, list k's pages are row list_row[k] of pages [page_rows, page_stride] instead of row k
// (lists kept on the device from step to step: a step uploads which row, not the pages).
struct PagedSlotsParams {
  int64_t rows = 0;
  int32_t width = 0;
  const int32_t* list = nullptr;   // [rows] which page list each row reads
  const int32_t* first = nullptr;  // [rows] first item of the row (null: 0)
  const int32_t* count = nullptr;  // [rows] items of the row, <= width, inside its list's pages
  const int32_t* pages = nullptr;  // [lists, page_stride]
  const int32_t* base = nullptr;   // [lists] first item of each list's pages (null: 0)
  int64_t lists = 0;
  int32_t page_stride = 0;
  int32_t per_page = 1;
  int32_t* out = nullptr;  // [rows, width]
  BlockPageMap map;
  const int32_t* list_row = nullptr;  // [lists], each in [0, page_rows) (null: list k reads row k)
  int64_t page_rows = 0;
};

// Greedy sampling where the logits are: out[r] = the first index of the maximum of x[r][0..limit)
// (ties to the lower index; NaN never wins), so a greedy step copies back one id per row.
struct ArgmaxParams {
  const float* x = nullptr;  // [rows, cols] fp32
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t limit = 0;       // 1 <= limit <= cols
  int32_t* out = nullptr;  // [rows]
};

// Sampling where the logits are, so a step copies back a few numbers per row instead of a row of
// logits. Per row r (SampleRow, backend/sampling_math.h), over the ids i < limit, in fp64:
//   z = x[r], then the row's edits in list order (SampleEdit), then NaN -> −inf, then −inf for the ids
//   outside the row's allow-set (SampleRow::allow_row);
//   greedy (temperature 0) or every z −inf: the first maximum of z (ties to the lower id);
//   else w_i = exp((z_i − zmax)/T) (1 at the maximum, exp of sampling_math.h); candidates w > 0 and
//   w >= min_p; top_k (> 0): the k heaviest (ties to the lower id); top_p (< 1): the shortest
//   heaviest-first prefix whose mass reaches ceil(p · its set's mass); mass m_i = floor(w_i · 2^44)
//   (exact integer sums); target = floor(floor(u · 2^53) · M / 2^53) with M the survivors' mass;
//   out: the lowest survivor whose running mass (ids ascending) exceeds target.
// logprobs n >= 0: l_i = x_i − log Σ exp(x_j − max x) − max x over the RAW logits (NaN = −inf);
// logprob[r] = l of the chosen id; top_id/top_logprob[r][0..n) the n most likely raw ids (ties to the
// lower id), then −1 / 0 up to top_width. Rows without logprobs get 0 and −1 / 0.
// `row` and `edits` are host arrays on every backend (the op copies them where it runs), so their
// contents are checked before anything is written. Each row's edit ids ascend (equal ids apply in
// list order), lie in [0, limit), and the rows' edit ranges follow each other without overlap.
struct SampleParams {
  const float* x = nullptr;  // [rows, cols] fp32
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t limit = 0;                  // 1 <= limit <= min(cols, kSampleMaxLimit)
  const SampleRow* row = nullptr;     // [rows], host memory
  const SampleEdit* edits = nullptr;  // [edit_count], host memory
  int64_t edit_count = 0;
  // [allow_rows] allow-sets (sampling_math.h) of ceil(limit / 32) words each, all in host memory. Pointers,
  // so a set kept elsewhere (a request's allowed_token_ids, a grammar's cached mask) is read where it lies
  // instead of copied into the step; several rows may share one.
  const uint32_t* const* allow = nullptr;
  int64_t allow_rows = 0;
  int32_t* token = nullptr;       // [rows]
  double* logprob = nullptr;      // [rows]; may be null when no row asks for logprobs
  int32_t top_width = 0;          // 0..kSampleMaxLogprobs, >= every row's logprobs
  int32_t* top_id = nullptr;      // [rows, top_width]
  double* top_logprob = nullptr;  // [rows, top_width]
  // [rows], or null: the chosen id's rank among the raw logits (1 + the ids whose raw logit is larger), for
  // rows that ask for logprobs (0 for the others).
  int64_t* rank = nullptr;
};

// Every op as X(name, Params prefix): Ops::name takes const <prefix>Params&. Expanded wherever every
// op is listed (the Ops front and its backends' overrides, tracing, profiling, checks).
#define DSV4_FOR_EACH_OP(X)            \
  X(linear, Linear)                    \
  X(rms_norm, RmsNorm)                 \
  X(head_rms_norm, HeadRmsNorm)        \
  X(rope, Rope)                        \
  X(hadamard, Hadamard)                \
  X(quant_sim, QuantSim)               \
  X(store_entries, StoreEntries)       \
  X(kv_insert, KvInsert)               \
  X(sparse_attention, SparseAttention) \
  X(compressor_step, CompressorStep)   \
  X(compressor_emit, CompressorEmit)   \
  X(indexer_topk, IndexerTopk)         \
  X(hc_pre, HcPre)                     \
  X(hc_post, HcPost)                   \
  X(hc_post_pre, HcPostPre)            \
  X(hc_head, HcHead)                   \
  X(moe_gate, MoeGate)                 \
  X(moe_experts, MoeExperts)           \
  X(moe_pairs, MoePairs)               \
  X(moe_combine, MoeCombine)           \
  X(shared_expert, SharedExpert)       \
  X(swiglu, Swiglu)                    \
  X(embed, Embed)                      \
  X(gather_rows, GatherRows)           \
  X(paged_slots, PagedSlots)           \
  X(argmax, Argmax)                    \
  X(sample, Sample)

}  // namespace dsv4
