// load_model with --hf-overrides on a real checkpoint: layers may be dropped (their tensors skipped),
// but a tensor the overrides would reshape is refused with a pointer to --load-format dummy.
#include "model/model_loader.h"

#include <gtest/gtest.h>

#include <cstring>

#include "testing/error_of.h"
#include "testing/tiny_model.h"

namespace dsv4 {
namespace {

using nlohmann::json;

TEST(ModelLoader, ACheckpointMayLoseLayers) {
  const LoadedModel& full = testing::tiny_model(5);
  const LoadedModel m =
      load_model(full.dir, {.hf_overrides = json{{"num_hidden_layers", 2}, {"num_nextn_predict_layers", 0}}});
  EXPECT_EQ(m.config.n_layers, 2);
  EXPECT_EQ(m.config.compress_ratios,
            (std::vector<int>(full.config.compress_ratios.begin(), full.config.compress_ratios.begin() + 2)));
  ASSERT_EQ(m.weights.layers.size(), 2u);
  EXPECT_TRUE(m.weights.mtp.empty());
  const LinearWeight &kept = m.weights.layers[1].attn.wq_a, &was = full.weights.layers[1].attn.wq_a;
  EXPECT_EQ(std::memcmp(kept.data, was.data, static_cast<size_t>(kept.out * kept.in)), 0);  // the checkpoint's bytes
  EXPECT_LT(m.tensors().size(), full.tensors().size());
  EXPECT_EQ(full.tensors().size(), full.checkpoint->num_tensors());
  EXPECT_EQ(m.options.describe(), "auto, hf-overrides {\"num_hidden_layers\":2,\"num_nextn_predict_layers\":0}");
}

TEST(ModelLoader, ACheckpointsTensorsCannotBeReshaped) {
  const LoadedModel& full = testing::tiny_model(5);
  const std::string e = testing::error_of([&] {
    load_model(full.dir, {.hf_overrides = json{{"n_routed_experts", 4}}});
  });
  EXPECT_NE(e.find("--load-format dummy"), std::string::npos) << e;
  EXPECT_NE(e.find("gate.weight"), std::string::npos) << e;
  // The same overrides make dummy weights of the new shapes.
  const LoadedModel d =
      load_model(full.dir, {.format = LoadFormat::kDummy, .hf_overrides = json{{"n_routed_experts", 4}}, .seed = 1});
  EXPECT_EQ(d.weights.layers[0].ffn.experts.size(), 4u);
  EXPECT_EQ(d.options.describe(), "dummy (seed 1), hf-overrides {\"n_routed_experts\":4}");
}

}  // namespace
}  // namespace dsv4
