// Weight binding: every official tensor name (MODEL.md §9.1) bound to a typed view into the
// mmapped checkpoint, with dtype and shape checks. Binding reads headers only (and the small
// tid2eid tables, which it validates); weight bytes are touched when the model first uses them.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/model_config.h"
#include "core/quant.h"
#include "io/checkpoint.h"

namespace dsv4 {

// A linear map W [out, in] in one of the release's storage formats.
struct LinearWeight {
  WeightFormat format = WeightFormat::kFp8;
  const uint8_t* data = nullptr;   // e4m3 [out, in] | packed e2m1 [out, in/2] | bf16 [out, in]
  const uint8_t* scale = nullptr;  // ue8m0 [ceil(out/128), ceil(in/128)] | [out, in/32] | null
  int64_t out = 0;
  int64_t in = 0;

  Fp8BlockWeight fp8() const { return {data, scale, out, in}; }
  Fp4BlockWeight fp4() const { return {data, scale, out, in}; }
  const uint16_t* bf16() const { return reinterpret_cast<const uint16_t*>(data); }
};

struct NormWeight {
  const uint16_t* weight = nullptr;  // bf16 [dim]
  int64_t dim = 0;
};

// Hyper-connection parameters of one sublayer (fn [24, 4D]) or of a head (fn [4, 4D]).
struct HcWeights {
  const float* fn = nullptr;
  const float* base = nullptr;
  const float* scale = nullptr;
  int64_t rows = 0;
};

struct CompressorWeights {
  int ratio = 0;                    // 4 (overlapping) or 128
  int64_t head_dim = 0;             // d_c: head_dim (attention) or index_head_dim (indexer)
  const uint16_t* wkv = nullptr;    // bf16 [c*d_c, D], c = 2 when ratio == 4
  const uint16_t* wgate = nullptr;  // bf16 [c*d_c, D]
  const float* ape = nullptr;       // fp32 [ratio, c*d_c]
  NormWeight norm;
};

struct IndexerWeights {
  LinearWeight wq_b;                       // [index_n_heads*index_head_dim, q_lora]
  const uint16_t* weights_proj = nullptr;  // bf16 [index_n_heads, D]
  CompressorWeights compressor;
};

struct AttentionWeights {
  LinearWeight wq_a, wq_b, wkv, wo_a, wo_b;  // wo_a: FP8 (HF) or bf16 (converted); used as bf16
  NormWeight q_norm, kv_norm;
  const float* attn_sink = nullptr;             // [heads]: wq_b's heads (a rank's under TP)
  std::optional<CompressorWeights> compressor;  // ratio 4 and 128
  std::optional<IndexerWeights> indexer;        // ratio 4
};

struct ExpertWeights {
  LinearWeight w1, w2, w3;
};

struct MoeWeights {
  const uint16_t* gate_weight = nullptr;  // bf16 [E, D]
  const float* gate_bias = nullptr;       // [E], score-routed layers
  const int64_t* tid2eid = nullptr;       // [vocab, top-k], hash-routed layers
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;
};

struct BlockWeights {
  int layer = 0;  // index into compress_ratios
  int ratio = 0;
  NormWeight attn_norm, ffn_norm;
  HcWeights hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights ffn;
};

struct MtpWeights {
  BlockWeights block;
  LinearWeight e_proj, h_proj;
  NormWeight enorm, hnorm, norm;
  HcWeights hc_head;
};

class WeightSource;  // model/weight_source.h

struct ModelWeights {
  // Null when the views point into a mapped checkpoint; else what makes the bytes behind them on demand
  // (--load-format dummy), which PlacedWeights asks before it reads a view.
  WeightSource* source = nullptr;
  const uint16_t* embed = nullptr;  // bf16 [vocab, D]
  LinearWeight head;                // bf16 [vocab, D] (a rank's vocabulary rows under TP)
  NormWeight norm;
  HcWeights hc_head;
  std::vector<BlockWeights> layers;
  std::vector<MtpWeights> mtp;
};

// Infers the routed-expert format from the tensors (I8 [out, in/2] + [out, in/32] scales = FP4,
// F8_E4M3 + 128x128 scales = FP8) and checks it against `declared` (inference/config.json).
WeightFormat infer_expert_format(const Checkpoint& ckpt, const ModelConfig& cfg, std::optional<WeightFormat> declared);

// Binds every tensor; all missing, unexpected or mistyped tensors are reported in one error. Tensors
// named in `dropped` may be in the checkpoint unbound (layers that --hf-overrides leaves out).
ModelWeights bind_weights(const Checkpoint& ckpt, const ModelConfig& cfg, const std::set<std::string>& dropped = {});

// The release's tensor inventory for a config (HF format: wo_a FP8 with scales), in binding order.
struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;

  uint64_t nbytes() const;
};
std::vector<TensorSpec> checkpoint_tensor_specs(const ModelConfig& cfg);

// Binds every tensor of checkpoint_tensor_specs(cfg) to where `locate` says its bytes are (the specs'
// layout, so no checks; nothing is read).
ModelWeights bind_weights(const ModelConfig& cfg, const std::function<const uint8_t*(const TensorSpec&)>& locate);

}  // namespace dsv4
