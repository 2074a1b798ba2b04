// make-tiny: official layout, deterministic from the seed, loads back bit-exactly, healthy scales.
#include "model_tools/random_checkpoint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "core/error.h"
#include "core/number_formats.h"
#include "core/quant.h"
#include "model/model_loader.h"
#include "model_tools/presets.h"
#include "testing/paths.h"

namespace dsv4 {
namespace {
namespace fs = std::filesystem;

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

TEST(RandomCheckpoint, SameSeedSameBytesOtherSeedOtherBytes) {
  const auto& cfg = find_preset("tiny").config;
  const fs::path a = testing::temp_dir("rc-a"), b = testing::temp_dir("rc-b"), c = testing::temp_dir("rc-c");
  write_random_checkpoint(cfg, 1, a);
  write_random_checkpoint(cfg, 1, b);
  write_random_checkpoint(cfg, 2, c);
  const std::string shard = "model-00001-of-00001.safetensors";
  EXPECT_EQ(slurp(a / shard), slurp(b / shard));
  EXPECT_NE(slurp(a / shard), slurp(c / shard));
  EXPECT_EQ(slurp(a / "config.json"), slurp(c / "config.json"));
}

TEST(RandomCheckpoint, TinyPresetHasTheGoldenLayout) {
  // The tiny preset shares tiny-a's shapes, so the official tooling's file is the layout oracle.
  const fs::path dir = testing::temp_dir("rc-layout");
  write_random_checkpoint(find_preset("tiny").config, 3, dir);
  const Checkpoint ours = Checkpoint::open(dir), theirs = Checkpoint::open(testing::golden_dir("tiny-a"));
  ASSERT_EQ(ours.names(), theirs.names());
  for (const auto& n : ours.names()) {
    EXPECT_EQ(ours.find(n)->dtype, theirs.find(n)->dtype) << n;
    EXPECT_EQ(ours.find(n)->shape, theirs.find(n)->shape) << n;
  }
  EXPECT_EQ(fs::file_size(dir / "model-00001-of-00001.safetensors"),
            fs::file_size(testing::golden_dir("tiny-a") / "model-00001-of-00001.safetensors"));
}

TEST(RandomCheckpoint, LoadsBackWithQuantizedValuesOnTheGrid) {
  const fs::path dir = testing::temp_dir("rc-load");
  write_random_checkpoint(find_preset("tiny").config, 4, dir, /*max_shard_bytes=*/2 << 20);
  const LoadedModel m = load_model(dir);
  EXPECT_GT(m.checkpoint->num_shards(), 1u);
  EXPECT_EQ(m.config.expert_format, WeightFormat::kFp4);
  // FP8 weights: unit-variance scaling 1/sqrt(in) survives quantization.
  const LinearWeight& wq_a = m.weights.layers[1].attn.wq_a;
  double ss = 0;
  std::vector<float> row(static_cast<size_t>(wq_a.in));
  for (int64_t r = 0; r < wq_a.out; ++r) {
    wq_a.fp8().dequant_row(r, row);
    for (float v : row) ss += double{v} * v;
  }
  const double std = std::sqrt(ss / static_cast<double>(wq_a.out * wq_a.in));
  EXPECT_NEAR(std, 1.0 / std::sqrt(256.0), 0.1 / std::sqrt(256.0));
  // tid2eid rows hold distinct experts (the loader validates all of them).
  const int64_t* t = m.weights.layers[0].ffn.tid2eid;
  EXPECT_NE(t[0], t[1]);
  // Norm weights near 1, kv_norm near 3 (attention-score std about 3).
  EXPECT_NEAR(bf16_to_float(m.weights.layers[0].attn_norm.weight[0]), 1.0f, 0.3f);
  EXPECT_NEAR(bf16_to_float(m.weights.layers[0].attn.kv_norm.weight[0]), 3.0f, 0.6f);
}

TEST(RandomCheckpoint, PresetsValidate) {
  for (const auto& name : preset_names()) EXPECT_NO_THROW(find_preset(name).config.validate()) << name;
  EXPECT_THROW(find_preset("huge"), Error);
  EXPECT_EQ(find_preset("serve").config.vocab_size, 129280);
  const ModelConfig& f = find_preset("flash-attn").config;
  EXPECT_EQ(f.n_routed_experts, 32);
  EXPECT_EQ(f.count_layers_with_ratio(4), 21);
}

}  // namespace
}  // namespace dsv4
