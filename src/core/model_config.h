// ModelConfig: the DeepSeek-V4 architecture parameters (MODEL.md §1.1), validated.
// Filled from a checkpoint's config.json by io/model_config_json.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dsv4 {

enum class ScoreFunc { kSqrtSoftplus, kSoftmax, kSigmoid };
enum class WeightFormat { kFp8, kFp4, kBf16 };

struct ModelConfig {
  std::string model_type = "deepseek_v4";
  int64_t vocab_size = 129280;
  int64_t dim = 4096;      // D (hidden_size)
  int n_layers = 43;       // main blocks (num_hidden_layers)
  int n_mtp_layers = 1;    // num_nextn_predict_layers
  int n_heads = 64;        // H
  int n_kv_heads = 1;      // the single shared K=V head
  int head_dim = 512;      // d
  int rope_head_dim = 64;  // r, the last r dims of a head
  int64_t q_lora_rank = 1024;
  int o_groups = 8;                     // G
  int64_t o_lora_rank = 1024;           // R
  int window_size = 128;                // W (sliding_window)
  std::vector<int> compress_ratios;     // n_layers + n_mtp_layers entries from {0, 4, 128}
  double rope_theta = 10000;            // ratio-0 layers, no YaRN
  double compress_rope_theta = 160000;  // ratio-4/128 layers, with YaRN
  int64_t original_seq_len = 65536;     // YaRN original_max_position_embeddings
  double rope_factor = 16;
  double beta_fast = 32;
  double beta_slow = 1;
  int index_n_heads = 64;
  int index_head_dim = 128;
  int index_topk = 512;
  int n_routed_experts = 256;  // E
  int n_shared_experts = 1;
  int n_activated_experts = 6;   // num_experts_per_tok
  int64_t moe_inter_dim = 2048;  // I
  ScoreFunc score_func = ScoreFunc::kSqrtSoftplus;
  double route_scale = 1.5;  // routed_scaling_factor
  double swiglu_limit = 10.0;
  int n_hash_layers = 3;
  int hc_mult = 4;
  int hc_sinkhorn_iters = 20;
  double hc_eps = 1e-6;
  double norm_eps = 1e-6;
  int64_t max_position_embeddings = 1048576;
  int64_t bos_token_id = 0;
  int64_t eos_token_id = 1;
  bool tie_word_embeddings = false;
  bool norm_topk_prob = true;
  // quantization_config
  WeightFormat weight_format = WeightFormat::kFp8;  // non-expert linears
  WeightFormat expert_format = WeightFormat::kFp4;  // routed experts
  int weight_block_rows = 128;
  int weight_block_cols = 128;

  // ---- derived ----
  int nope_head_dim() const { return head_dim - rope_head_dim; }
  int compress_ratio(int layer) const { return compress_ratios.at(static_cast<size_t>(layer)); }
  int64_t hc_dim() const { return hc_mult * dim; }            // flattened streams
  int hc_mix_dim() const { return (2 + hc_mult) * hc_mult; }  // 24
  int64_t o_group_in() const { return int64_t{n_heads} * head_dim / o_groups; }
  int count_layers_with_ratio(int ratio) const;  // main layers only

  // Throws dsv4::Error naming the first inconsistent or unsupported field.
  void validate() const;
};

// The real DeepSeek-V4-Flash configuration (../shared/configs/deepseek-v4-flash).
ModelConfig v4_flash_config();

}  // namespace dsv4
