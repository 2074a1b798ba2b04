// Weight binding against the golden checkpoints (made by DeepSeek's tooling) and broken copies.
#include "model/weights.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/number_formats.h"
#include "io/model_config_json.h"
#include "io/safetensors_writer.h"
#include "model/model_loader.h"
#include "testing/paths.h"

namespace dsv4 {
namespace {
namespace fs = std::filesystem;

TEST(Weights, BindsEveryTensorOfBothGoldenSets) {
  for (const char* set : {"tiny-a", "tiny-b"}) {
    const LoadedModel m = load_model(testing::golden_dir(set));
    EXPECT_EQ(m.config.expert_format, WeightFormat::kFp4) << set;
    EXPECT_EQ(m.weights.layers.size(), 4u);
    EXPECT_EQ(m.weights.mtp.size(), 1u);
    EXPECT_EQ(checkpoint_tensor_specs(m.config).size(), m.checkpoint->num_tensors()) << set;
  }
}

TEST(Weights, KnownTensorsOfTinyA) {
  const LoadedModel m = load_model(testing::golden_dir("tiny-a"));
  const ModelWeights& w = m.weights;
  // Layer kinds follow compress_ratios [0, 4, 128, 4, 0]; hash routing only in layer 0.
  EXPECT_FALSE(w.layers[0].attn.compressor.has_value());
  ASSERT_TRUE(w.layers[1].attn.indexer.has_value());
  EXPECT_EQ(w.layers[1].attn.compressor->ratio, 4);
  EXPECT_EQ(w.layers[2].attn.compressor->ratio, 128);
  EXPECT_FALSE(w.layers[2].attn.indexer.has_value());
  EXPECT_NE(w.layers[0].ffn.tid2eid, nullptr);
  EXPECT_EQ(w.layers[0].ffn.gate_bias, nullptr);
  EXPECT_NE(w.layers[1].ffn.gate_bias, nullptr);
  // Views point at the right bytes of the file.
  const auto wq_a = m.checkpoint->tensor("layers.0.attn.wq_a.weight");
  EXPECT_EQ(w.layers[0].attn.wq_a.data, wq_a.data.data());
  EXPECT_EQ(w.layers[0].attn.wq_a.out, 128);
  EXPECT_EQ(w.layers[0].attn.wq_a.in, 256);
  const auto w1 = m.checkpoint->tensor("layers.3.ffn.experts.5.w1.scale");
  EXPECT_EQ(w.layers[3].ffn.experts[5].w1.scale, w1.data.data());
  EXPECT_EQ(w.layers[3].ffn.experts[5].w1.format, WeightFormat::kFp4);
  EXPECT_EQ(w.layers[1].attn.compressor->wkv,
            reinterpret_cast<const uint16_t*>(m.checkpoint->tensor("layers.1.attn.compressor.wkv.weight").data.data()));
  // Values: every FP8 scale of a real checkpoint is a finite power of two; tid2eid rows are valid.
  const auto sc = m.checkpoint->tensor("layers.2.attn.wo_b.scale");
  for (uint8_t e : sc.data) EXPECT_LT(e, 255);
  for (int k = 0; k < 2; ++k) EXPECT_LT(w.layers[0].ffn.tid2eid[k], 8);
  const float emb = bf16_to_float(w.embed[0]);
  EXPECT_TRUE(std::isfinite(emb));
}

// Rewrites tiny-a with some tensors dropped, renamed or reshaped, and (poke) bytes overwritten:
// {tensor, byte index, value}.
struct Poke {
  std::string tensor;
  size_t index;
  uint8_t value;
};
fs::path broken_copy(const std::string& drop, const std::string& extra, const std::string& reshape,
                     const std::vector<Poke>& pokes = {}) {
  const fs::path src = testing::golden_dir("tiny-a");
  const fs::path dir = testing::temp_dir("broken");
  fs::copy_file(src / "config.json", dir / "config.json");
  const Checkpoint ck = Checkpoint::open(src);
  SafetensorsWriter out;
  for (const auto& n : ck.names()) {
    if (n == drop) continue;
    const TensorRef t = ck.tensor(n);
    auto shape = t.info->shape;
    if (n == reshape) std::swap(shape[0], shape[1]);
    std::vector<uint8_t> bytes(t.data.begin(), t.data.end());
    for (const Poke& p : pokes) {
      if (p.tensor == n) bytes.at(p.index) = p.value;
    }
    out.add(n, t.info->dtype, shape, bytes);
  }
  out.add(extra, DType::kF32, {2}, std::vector<uint8_t>(8, 0));
  out.write(dir / "model.safetensors");
  return dir;
}

// The error load_model(dir) raises; a test failure (and "") when it loads.
std::string load_error(const fs::path& dir) {
  try {
    load_model(dir);
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "loaded the broken checkpoint " << dir;
  return {};
}

TEST(Weights, ReportsAllMissingUnexpectedAndMistypedTensorsTogether) {
  const std::string msg =
      load_error(broken_copy("layers.2.attn.compressor.ape", "layers.9.attn.bogus", "layers.1.attn.wq_b.weight"));
  EXPECT_NE(msg.find("1 missing tensor(s):\n    layers.2.attn.compressor.ape"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1 wrong dtype or shape tensor(s):\n    layers.1.attn.wq_b.weight: expected F8_E4M3 [512, "
                     "128], found F8_E4M3 [128, 512]"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("1 unexpected tensor(s):\n    layers.9.attn.bogus"), std::string::npos) << msg;
}

// NaN codes in FP8 weights or their scales are refused by name, with the count and the first one;
// a finite code next to them (0x7e, the largest e4m3; 0xfe, the largest e8m0) is not.
TEST(Weights, RefusesNanCodesInFp8WeightsAndScales) {
  const std::string msg = load_error(broken_copy("", "extra.unused", "",
                                                 {{"layers.1.attn.wq_b.weight", 17, 0x7f},
                                                  {"layers.1.attn.wq_b.weight", 40, 0xff},
                                                  {"layers.1.attn.wq_b.weight", 41, 0x7e},
                                                  {"layers.2.attn.wo_b.scale", 0, 0xff},
                                                  {"layers.2.attn.wkv.scale", 0, 0xfe}}));
  EXPECT_NE(msg.find("2 corrupt (NaN codes) tensor(s):"), std::string::npos) << msg;
  EXPECT_NE(msg.find("layers.1.attn.wq_b.weight: 2 NaN e4m3 code(s), the first at element 17"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("layers.2.attn.wo_b.scale: 1 NaN e8m0 code(s), the first at element 0"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("wkv.scale"), std::string::npos) << msg;
  // Scanned on several threads, reported in binding order.
  EXPECT_LT(msg.find("layers.1.attn.wq_b.weight"), msg.find("layers.2.attn.wo_b.scale")) << msg;
}

TEST(Weights, RefusesACheckpointForAnotherConfig) {
  ModelConfig cfg = load_model_config(testing::golden_dir("tiny-a"));
  cfg.n_routed_experts = 6;  // the file has 8 experts per layer
  const Checkpoint ck = Checkpoint::open(testing::golden_dir("tiny-a"));
  try {
    bind_weights(ck, cfg);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unexpected tensor(s)"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("layers.0.ffn.gate.weight: expected BF16 [6, 256], found BF16 [8, 256]"),
              std::string::npos)
        << e.what();
  }
}

TEST(Weights, ExpertFormatMustAgreeWithInferenceConfig) {
  const ModelConfig cfg = load_model_config(testing::golden_dir("tiny-a"));
  const Checkpoint ck = Checkpoint::open(testing::golden_dir("tiny-a"));
  EXPECT_EQ(infer_expert_format(ck, cfg, std::nullopt), WeightFormat::kFp4);
  EXPECT_THROW(infer_expert_format(ck, cfg, WeightFormat::kFp8), Error);
}

}  // namespace
}  // namespace dsv4
