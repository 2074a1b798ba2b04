// --load-format dummy: the bytes of write_random_checkpoint for the same config and seed, made only
// when PlacedWeights asks, and on the way to a device one tensor at a time (the host never holds the
// model); a model too big for the device is refused before anything is made.
#include "model/dummy_weights.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "model/model_loader.h"
#include "model/placed_weights.h"
#include "model/weight_shard.h"
#include "model_tools/presets.h"
#include "model_tools/random_checkpoint.h"
#include "testing/foreign_device.h"
#include "testing/paths.h"

namespace dsv4 {
namespace {

const ModelConfig& tiny() { return find_preset("tiny").config; }

// write_random_checkpoint's model for `seed`, loaded from a fresh folder.
LoadedModel random_checkpoint(const std::string& name, uint64_t seed) {
  const auto dir = testing::temp_dir(name);
  write_random_checkpoint(tiny(), seed, dir);
  return load_model(dir);
}

bool same_bytes(const DummyWeights& d, size_t i, std::span<const uint8_t> want) {
  return want.size() == d.specs()[i].nbytes() && std::memcmp(d.view(i), want.data(), want.size()) == 0;
}

TEST(DummyWeights, AreTheRandomCheckpointsBytes) {
  const auto dir = testing::temp_dir("dummy-bytes");
  write_random_checkpoint(tiny(), 11, dir);
  const Checkpoint ckpt = Checkpoint::open(dir);
  DummyWeights d(tiny(), 11);
  ASSERT_EQ(d.specs().size(), ckpt.num_tensors());
  EXPECT_EQ(d.total_bytes(), ckpt.total_bytes());
  EXPECT_EQ(d.resident_bytes(), 0u);  // nothing is made until asked
  for (size_t i = 0; i < d.specs().size(); ++i) {
    const TensorSpec& s = d.specs()[i];
    const TensorRef t = ckpt.tensor(s.name);
    EXPECT_EQ(t.info->dtype, s.dtype) << s.name;
    EXPECT_EQ(t.info->shape, s.shape) << s.name;
    d.acquire(d.view(i));
    EXPECT_TRUE(same_bytes(d, i, t.data)) << s.name;
  }
  EXPECT_EQ(d.resident_bytes(), d.total_bytes());
}

TEST(DummyWeights, OtherSeedOtherBytesAndReleasedTensorsAreMadeAgain) {
  DummyWeights a(tiny(), 1), b(tiny(), 2);
  const size_t embed = 0;
  ASSERT_EQ(a.specs()[embed].name, "embed.weight");
  a.acquire(a.view(embed));
  b.acquire(b.view(embed));
  const std::vector<uint8_t> first(a.view(embed), a.view(embed) + a.specs()[embed].nbytes());
  EXPECT_NE(std::memcmp(a.view(embed), b.view(embed), first.size()), 0);
  a.release(a.view(embed));
  EXPECT_EQ(a.resident_bytes(), 0u);
  a.acquire(a.view(embed));
  EXPECT_EQ(std::memcmp(a.view(embed), first.data(), first.size()), 0);
}

// The device path: every tensor is released once copied, so the host holds the few the model prepares
// itself (wo_a, tid2eid) and, at the peak, one more tensor or quantized pair.
TEST(DummyWeights, PlacingOnADeviceKeepsTheHostSmall) {
  DummyWeights d(tiny(), 3);
  testing::ForeignDevice dev;
  const PlacedWeights placed(d.weights(), tiny(), dev);
  uint64_t kept = 0, largest = 0;
  for (const auto& b : d.weights().layers) {
    kept += static_cast<uint64_t>(b.attn.wo_a.out * b.attn.wo_a.in) + (b.attn.wo_a.out / 128) * (b.attn.wo_a.in / 128);
    if (b.ffn.tid2eid) kept += static_cast<uint64_t>(tiny().vocab_size * tiny().n_activated_experts) * 8;
  }
  for (size_t i = 0; i < d.specs().size(); ++i) {
    const uint64_t n = d.specs()[i].nbytes();
    largest = std::max(largest, RandomTensors::is_quantized(d.specs()[i]) ? 2 * n : n);  // a pair: data + scales
  }
  EXPECT_EQ(d.resident_bytes(), kept);
  EXPECT_LE(d.peak_resident_bytes(), kept + largest);
  EXPECT_LT(d.peak_resident_bytes(), d.total_bytes() / 4);
  EXPECT_TRUE(dev.owns(placed.get().embed));
}

TEST(DummyWeights, TooBigForTheDeviceIsRefusedBeforeAnythingIsMade) {
  DummyWeights d(tiny(), 3);
  const uint64_t need = PlacedWeights::bytes_needed(d.weights(), tiny());
  testing::ForeignDevice dev(need - 1);
  try {
    PlacedWeights placed(d.weights(), tiny(), dev);
    FAIL() << "placed weights larger than the device";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(std::to_string(need) + " bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(need - 1) + " bytes"), std::string::npos) << e.what();
  }
  EXPECT_EQ(d.peak_resident_bytes(), 0u);
}

// A rank's views start inside their tensors (model/weight_shard.h): placing a TP rank's shard makes the
// tensors that hold them, and the copies are that rank's rows of the checkpoint's.
TEST(DummyWeights, PlaceARanksShardFromViewsInsideTheTensors) {
  const LoadedModel ckpt = random_checkpoint("dummy-shard", 4);
  DummyWeights d(tiny(), 4);
  const ParallelLayout l = plan_parallel(tiny(), {2, 1, false});
  testing::ForeignDevice dev;
  const PlacedWeights placed(shard_weights(d.weights(), tiny(), l, 1), tiny(), dev);
  const ModelWeights want = shard_weights(ckpt.weights, tiny(), l, 1);
  const LinearWeight &got_q = placed.get().layers[1].attn.wq_b, &want_q = want.layers[1].attn.wq_b;
  ASSERT_EQ(got_q.out, want_q.out);
  EXPECT_EQ(std::memcmp(got_q.data, want_q.data, static_cast<size_t>(want_q.out * want_q.in)), 0);
  const LinearWeight &got_h = placed.get().head, &want_h = want.head;
  EXPECT_EQ(std::memcmp(got_h.data, want_h.data, static_cast<size_t>(want_h.out * want_h.in * 2)), 0);
  EXPECT_TRUE(dev.owns(got_h.data));
}

// A tensor two ranks acquired stays made until both released it.
TEST(DummyWeights, ATensorLastsUntilItsLastUserReleasesIt) {
  DummyWeights d(tiny(), 8);
  const size_t embed = 0;
  d.acquire(d.view(embed));
  d.acquire(d.view(embed));
  const uint64_t made = d.resident_bytes();
  ASSERT_GT(made, 0u);
  d.release(d.view(embed));
  EXPECT_EQ(d.resident_bytes(), made);
  d.release(d.view(embed));
  EXPECT_EQ(d.resident_bytes(), 0u);
}

// The engine's ranks place their shards at once, each on its own thread: every rank gets the
// checkpoint's rows, and the tensors they shared are released once all copies landed.
TEST(DummyWeights, RanksPlacingAtOnceGetTheirShardsBytes) {
  const LoadedModel ckpt = random_checkpoint("dummy-ranks", 9);
  DummyWeights d(tiny(), 9);
  const ParallelLayout l = plan_parallel(tiny(), {4, 1, false});
  std::vector<std::string> wrong(4);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 4; ++r) {
    ranks.emplace_back([&, r] {
      testing::ForeignDevice dev;
      const PlacedWeights placed(shard_weights(d.weights(), tiny(), l, r), tiny(), dev);
      const ModelWeights want = shard_weights(ckpt.weights, tiny(), l, r);
      for (size_t b = 0; b < want.layers.size(); ++b) {
        const LinearWeight &got = placed.get().layers[b].attn.wq_b, &w = want.layers[b].attn.wq_b;
        if (got.out != w.out || std::memcmp(got.data, w.data, static_cast<size_t>(w.out * w.in)) != 0)
          wrong[static_cast<size_t>(r)] += "wq_b of layer " + std::to_string(b) + " ";
        const auto e = static_cast<size_t>(tiny().dim * 2);
        if (std::memcmp(placed.get().embed, want.embed, e) != 0) wrong[static_cast<size_t>(r)] += "embed ";
      }
    });
  }
  for (auto& t : ranks) t.join();
  for (int r = 0; r < 4; ++r) EXPECT_EQ(wrong[static_cast<size_t>(r)], "") << "rank " << r;
  DummyWeights one(tiny(), 9);
  testing::ForeignDevice dev;
  const PlacedWeights alone(one.weights(), tiny(), dev);
  EXPECT_EQ(d.resident_bytes(), one.resident_bytes());  // only what the models prepare themselves is kept
}

}  // namespace
}  // namespace dsv4
