#include "core/model_config.h"

#include "core/error.h"

namespace dsv4 {
namespace {

bool is_pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

}  // namespace

int ModelConfig::count_layers_with_ratio(int ratio) const {
  int n = 0;
  for (int i = 0; i < n_layers; ++i) n += compress_ratio(i) == ratio;
  return n;
}

void ModelConfig::validate() const {
  auto positive = [](const char* name, int64_t v) {
    DSV4_CHECK(v > 0, "config: {} must be positive, got {}", name, v);
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", dim);
  positive("num_hidden_layers", n_layers);
  positive("num_attention_heads", n_heads);
  positive("head_dim", head_dim);
  positive("q_lora_rank", q_lora_rank);
  positive("o_groups", o_groups);
  positive("o_lora_rank", o_lora_rank);
  positive("sliding_window", window_size);
  positive("index_n_heads", index_n_heads);
  positive("index_topk", index_topk);
  positive("n_routed_experts", n_routed_experts);
  positive("num_experts_per_tok", n_activated_experts);
  positive("moe_intermediate_size", moe_inter_dim);
  positive("max_position_embeddings", max_position_embeddings);
  DSV4_CHECK(n_mtp_layers >= 0, "config: num_nextn_predict_layers must be >= 0, got {}", n_mtp_layers);
  DSV4_CHECK(n_kv_heads == 1, "config: num_key_value_heads must be 1 (one shared K=V head), got {}", n_kv_heads);
  DSV4_CHECK(hc_mult == 4, "config: hc_mult must be 4, got {}", hc_mult);
  DSV4_CHECK(hc_sinkhorn_iters >= 1, "config: hc_sinkhorn_iters must be >= 1, got {}", hc_sinkhorn_iters);
  DSV4_CHECK(n_shared_experts == 1, "config: n_shared_experts must be 1, got {}", n_shared_experts);
  DSV4_CHECK(n_activated_experts <= n_routed_experts, "config: num_experts_per_tok ({}) exceeds n_routed_experts ({})",
             n_activated_experts, n_routed_experts);
  DSV4_CHECK(n_hash_layers >= 0 && n_hash_layers <= n_layers,
             "config: num_hash_layers ({}) must lie in [0, num_hidden_layers={}]", n_hash_layers, n_layers);
  DSV4_CHECK(rope_head_dim > 0 && rope_head_dim % 2 == 0 && rope_head_dim < head_dim,
             "config: qk_rope_head_dim ({}) must be even and below head_dim ({})", rope_head_dim, head_dim);
  DSV4_CHECK(nope_head_dim() % 64 == 0, "config: head_dim - qk_rope_head_dim = {} must be a multiple of 64",
             nope_head_dim());
  DSV4_CHECK(is_pow2(index_head_dim) && index_head_dim % 32 == 0 && index_head_dim >= rope_head_dim,
             "config: index_head_dim ({}) must be a power of two, a multiple of 32 and >= qk_rope_head_dim ({})",
             index_head_dim, rope_head_dim);
  DSV4_CHECK(n_heads % o_groups == 0, "config: num_attention_heads ({}) must be divisible by o_groups ({})", n_heads,
             o_groups);
  // Every FP8/FP4 linear quantizes its input in 1x128 blocks (MODEL.md §11.3).
  DSV4_CHECK(dim % 128 == 0, "config: hidden_size ({}) must be a multiple of 128", dim);
  DSV4_CHECK(q_lora_rank % 128 == 0, "config: q_lora_rank ({}) must be a multiple of 128", q_lora_rank);
  DSV4_CHECK((int64_t{o_groups} * o_lora_rank) % 128 == 0,
             "config: o_groups * o_lora_rank ({}) must be a multiple of 128", int64_t{o_groups} * o_lora_rank);
  DSV4_CHECK(o_group_in() % 128 == 0,
             "config: num_attention_heads * head_dim / o_groups ({}) must be a multiple of 128", o_group_in());
  DSV4_CHECK(moe_inter_dim % 128 == 0, "config: moe_intermediate_size ({}) must be a multiple of 128", moe_inter_dim);
  DSV4_CHECK(static_cast<int>(compress_ratios.size()) == n_layers + n_mtp_layers,
             "config: compress_ratios has {} entries, expected num_hidden_layers + num_nextn_predict_layers = {}",
             compress_ratios.size(), n_layers + n_mtp_layers);
  for (size_t i = 0; i < compress_ratios.size(); ++i) {
    const int r = compress_ratios[i];
    DSV4_CHECK(r == 0 || r == 4 || r == 128, "config: compress_ratios[{}] = {} (allowed: 0, 4, 128)", i, r);
  }
  for (int i = n_layers; i < n_layers + n_mtp_layers; ++i) {
    DSV4_CHECK(compress_ratio(i) == 0, "config: compress_ratios[{}] belongs to an MTP block and must be 0, got {}", i,
               compress_ratio(i));
  }
  DSV4_CHECK(index_topk > 0, "config: index_topk must be positive");
  DSV4_CHECK(rope_theta > 0 && compress_rope_theta > 0, "config: rope thetas must be positive");
  DSV4_CHECK(rope_factor >= 1, "config: rope_scaling.factor must be >= 1, got {}", rope_factor);
  DSV4_CHECK(original_seq_len > 0, "config: rope_scaling.original_max_position_embeddings must be positive");
  DSV4_CHECK(norm_eps > 0 && hc_eps > 0, "config: rms_norm_eps and hc_eps must be positive");
  DSV4_CHECK(weight_block_rows == 128 && weight_block_cols == 128,
             "config: quantization_config.weight_block_size must be [128, 128], got [{}, {}]", weight_block_rows,
             weight_block_cols);
  DSV4_CHECK(expert_format != WeightFormat::kFp4 || dim % 32 == 0, "config: FP4 experts need hidden_size % 32 == 0");
}

ModelConfig v4_flash_config() {
  ModelConfig c;
  c.compress_ratios = {0, 0};
  for (int i = 2; i < 43; ++i) c.compress_ratios.push_back(i % 2 == 0 ? 4 : 128);
  c.compress_ratios.push_back(0);  // MTP block
  return c;
}

}  // namespace dsv4
