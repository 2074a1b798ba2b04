// The device path of the model without a GPU: a host device that reports its memory as foreign (so
// the model copies its weights, its KV pools come from the device, its logits rows are gathered with
// device copies) must give bit-identical logits to the plain host path, and every weight view the
// ops read must point into the copies, never back into the checkpoint.
#include "model/placed_weights.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "backend/cpu/cpu_ops.h"
#include "model/model.h"
#include "model/paged_kv.h"
#include "testing/foreign_device.h"
#include "testing/prefill_decode.h"
#include "testing/tiny_model.h"

namespace dsv4 {
namespace {

class PlacedWeightsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { model_ = &testing::tiny_model(5); }

  // Prefill then three decode steps of two sequences through a paged cache in `dev`'s memory.
  static std::vector<float> run(Device& dev) { return run(dev, *model_); }
  static std::vector<float> run(Device& dev, const LoadedModel& model) {
    const ModelConfig& c = model.config;
    CpuOps ops(2);
    Model m(c, model.weights, ops, dev);
    std::mt19937 rng(3);
    std::vector<int32_t> ids(600);
    for (auto& x : ids) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab_size));
    const int64_t lens[2] = {261, 133};
    return testing::prefill_then_decode(m, dev, lens, ids, 3);
  }

  static const LoadedModel* model_;
};
const LoadedModel* PlacedWeightsTest::model_ = nullptr;

TEST_F(PlacedWeightsTest, ForeignDeviceGivesTheHostPathsLogitsBitForBit) {
  HostDevice host;
  testing::ForeignDevice foreign;
  const auto want = run(host);
  const auto got = run(foreign);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(got[i], want[i]) << "logit " << i;
}

TEST_F(PlacedWeightsTest, EveryViewPointsIntoTheCopies) {
  testing::ForeignDevice dev;
  const ModelConfig& c = model_->config;
  const PlacedWeights placed(model_->weights, c, dev);
  const ModelWeights& w = placed.get();
  EXPECT_EQ(
      placed.device_bytes() +
          [&] {
            uint64_t wo_a = 0;  // the bf16 form the model uploads, and the FP8 twin beside it
            for (const auto& b : w.layers) {
              const auto values = static_cast<uint64_t>(b.attn.wo_a.out * b.attn.wo_a.in);
              wo_a += values * 2;
              if (b.attn.wo_a.format == WeightFormat::kFp8) wo_a += values + values / (128 * 128);
            }
            return wo_a;
          }(),
      PlacedWeights::bytes_needed(model_->weights, c));
  std::vector<const void*> views = {w.embed, w.head.data, w.norm.weight, w.hc_head.fn, w.hc_head.base, w.hc_head.scale};
  for (const auto& b : w.layers) {
    const auto& a = b.attn;
    for (const void* p : {static_cast<const void*>(b.attn_norm.weight), static_cast<const void*>(b.hc_ffn.fn),
                          static_cast<const void*>(a.wq_a.data), static_cast<const void*>(a.wq_a.scale),
                          static_cast<const void*>(a.wq_b.data), static_cast<const void*>(a.wkv.data),
                          static_cast<const void*>(a.wo_b.scale), static_cast<const void*>(a.q_norm.weight),
                          static_cast<const void*>(a.attn_sink), static_cast<const void*>(b.ffn.gate_weight),
                          static_cast<const void*>(b.ffn.shared.w2.data)})
      views.push_back(p);
    if (b.ffn.gate_bias) views.push_back(b.ffn.gate_bias);
    for (const auto& e : b.ffn.experts)
      for (const void* p : {static_cast<const void*>(e.w1.data), static_cast<const void*>(e.w2.scale),
                            static_cast<const void*>(e.w3.data)})
        views.push_back(p);
    if (a.compressor) {
      views.push_back(a.compressor->wkv);
      views.push_back(a.compressor->ape);
      views.push_back(a.compressor->norm.weight);
    }
    if (a.indexer) {
      views.push_back(a.indexer->wq_b.data);
      views.push_back(a.indexer->weights_proj);
      views.push_back(a.indexer->compressor.wgate);
    }
  }
  for (size_t i = 0; i < views.size(); ++i) EXPECT_TRUE(dev.owns(views[i])) << "view " << i << " was not placed";
  EXPECT_TRUE(w.mtp.empty());
}

// --load-format dummy with the checkpoint's seed is that checkpoint: the same logits bit for bit, on the
// host (weights made in place) and through the device path (made one tensor at a time, then copied).
TEST_F(PlacedWeightsTest, DummyWeightsOfTheSeedGiveTheCheckpointsLogits) {
  const LoadedModel dummy = load_model(model_->dir, {.format = LoadFormat::kDummy, .seed = 5});
  ASSERT_EQ(dummy.checkpoint, nullptr);
  HostDevice host;
  testing::ForeignDevice foreign;
  const auto want = run(host);
  const auto on_host = run(host, dummy);
  const auto on_device = run(foreign, dummy);
  ASSERT_EQ(on_host.size(), want.size());
  ASSERT_EQ(on_device.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(on_host[i], want[i]) << "logit " << i;
    ASSERT_EQ(on_device[i], want[i]) << "logit " << i;
  }
  const LoadedModel other = load_model(model_->dir, {.format = LoadFormat::kDummy, .seed = 6});
  EXPECT_NE(run(host, other), want);
}

}  // namespace
}  // namespace dsv4
