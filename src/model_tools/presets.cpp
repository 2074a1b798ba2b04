#include "model_tools/presets.h"

#include <fmt/ranges.h>

#include "core/error.h"

namespace dsv4 {
namespace {

// Small dims that keep every constraint of MODEL.md §11.3.
ModelConfig small_config(int64_t vocab) {
  ModelConfig c;
  c.vocab_size = vocab;
  c.dim = 256;
  c.n_layers = 4;
  c.n_mtp_layers = 1;
  c.n_heads = 4;
  c.head_dim = 128;
  c.rope_head_dim = 64;
  c.q_lora_rank = 128;
  c.o_groups = 2;
  c.o_lora_rank = 128;
  c.window_size = 128;
  c.compress_ratios = {0, 4, 128, 4, 0};
  c.index_n_heads = 4;
  c.index_head_dim = 128;
  c.index_topk = 16;
  c.n_routed_experts = 8;
  c.n_activated_experts = 2;
  c.moe_inter_dim = 128;
  c.n_hash_layers = 1;
  return c;
}

ModelConfig flash_attn_config() {
  ModelConfig c = v4_flash_config();
  c.n_routed_experts = 32;
  return c;
}

const std::vector<Preset>& presets() {
  static const std::vector<Preset> p = {
      {"tiny", "CI-sized: dim 256, layers [0, 4, 128, 4] + MTP, vocab 1024", small_config(1024), 20261129},
      {"serve", "embedded default: dim 256, layers [0, 4, 128, 4] + MTP, the V4 tokenizer's vocab 129280",
       small_config(129280), 4},
      {"flash-attn", "V4-Flash attention dims, 43 layers + MTP, 32 routed experts (top-6)", flash_attn_config(), 7},
  };
  return p;
}

}  // namespace

const Preset& find_preset(std::string_view name) {
  for (const auto& p : presets()) {
    if (p.name == name) return p;
  }
  fail("unknown preset \"{}\" (known: {})", name, fmt::join(preset_names(), ", "));
}

std::vector<std::string> preset_names() {
  std::vector<std::string> n;
  for (const auto& p : presets()) n.push_back(p.name);
  return n;
}

}  // namespace dsv4
