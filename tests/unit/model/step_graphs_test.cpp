// StepGraphs' life cycle on a host device that pretends to record: which steps run their work
// eagerly, which are recorded, which replay, and what makes a recording stale.
#include "model/step_graphs.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "backend/cpu/cpu_ops.h"
#include "core/error.h"
#include "model/dense_kv.h"
#include "model_tools/presets.h"

namespace dsv4 {
namespace {

// Host memory, plus a pretend recorder: the work "recorded" runs at once, replay() only counts.
class RecordingHost final : public Device {
 public:
  bool host_memory() const override { return true; }
  uint64_t memory_capacity() const override { return host_.memory_capacity(); }
  uint64_t memory_free() const override { return host_.memory_free(); }
  void* allocate(size_t bytes) override { return host_.allocate(bytes); }
  void release(void* p) override { host_.release(p); }
  void to_device(void* dst, const void* src, size_t bytes) override {
    DSV4_CHECK(!recording, "host copy while recording");
    host_.to_device(dst, src, bytes);
  }
  void to_host(void* dst, const void* src, size_t bytes) override {
    DSV4_CHECK(!recording, "host copy while recording");
    host_.to_host(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override { host_.copy(dst, src, bytes); }
  void fill_zero(void* p, size_t bytes) override { host_.fill_zero(p, bytes); }
  void synchronize() override {}

  bool can_record() const override { return true; }
  void begin_recording() override { recording = true; }
  std::unique_ptr<Recording> end_recording() override {
    recording = false;
    DSV4_CHECK(!fail_end, "recording failed");
    return std::make_unique<Recording>();
  }
  void abort_recording() noexcept override { recording = false; }
  void replay(const Recording&) override {
    DSV4_CHECK(!fail_replay, "replay failed");
    std::this_thread::sleep_for(replay_time);
    ++replays;
  }

  bool recording = false, fail_end = false, fail_replay = false;
  std::chrono::milliseconds replay_time{0};
  int replays = 0;

 private:
  HostDevice host_;
};

// CpuOps' paged_slots (the only op StepIndex::expand runs) with a settable scratch epoch.
class EpochOps final : public Ops {
 public:
  uint64_t scratch_epoch() const override { return epoch; }

  uint64_t epoch = 1;

 protected:
#define DSV4_FORWARD_OP(name, P) \
  void do_##name(const P##Params& p) override { run(#name, p); }
  DSV4_FOR_EACH_OP(DSV4_FORWARD_OP)
#undef DSV4_FORWARD_OP

 private:
  template <typename P>
  void run(const char* name, const P&) {
    fail("EpochOps: {} not expected", name);
  }
  void run(const char*, const PagedSlotsParams& p) { cpu_.paged_slots(p); }

  CpuOps cpu_{1};
};

class StepGraphsTest : public ::testing::Test {
 protected:
  const ModelConfig& cfg = find_preset("tiny").config;
  RecordingHost dev;
  EpochOps ops;
  DenseKv kv{dev, cfg, 24, 600};
  int bodies = 0;

  // One decode step of `n` sequences at position `pos` through `g`.
  void step(StepGraphs& g, int n, int64_t pos, KvAccess* other = nullptr, bool record = true) {
    ForwardBatch b;
    const int32_t id = 5;
    for (int s = 0; s < n; ++s) b.add(s, pos, &id, 1);
    const auto shape = decode_shape(cfg, b);
    ASSERT_TRUE(shape);
    g.run(*shape, pad_batch(b, *shape), other ? *other : kv, record, [&](StepIndex& s, float*) {
      ++bodies;
      ASSERT_EQ(s.slices, shape->batch);
      s.expand(ops, 1);  // a layer's lists, as the model expands them
      ASSERT_NE(s.layers[1].window_read.data(), nullptr);
      ASSERT_EQ(s.layers[2].window_read.data(), nullptr);
    });
  }
};

TEST_F(StepGraphsTest, WarmsUpThenRecordsThenReplays) {
  StepGraphs g(dev, ops, cfg);
  for (int i = 0; i < 5; ++i) step(g, 3, 40 + i);
  EXPECT_EQ(bodies, 2);  // the eager warm-up and the recording
  EXPECT_EQ(g.stats().eager, 1);
  EXPECT_EQ(g.stats().recorded, 1);
  EXPECT_EQ(g.stats().replayed, 3);
  EXPECT_EQ(dev.replays, 4);  // the recording's own launch too
}

// The host's share of the last step: its index built, its recording launched (none for an eager step).
TEST_F(StepGraphsTest, StatsTimeTheLastStepsIndexAndLaunch) {
  StepGraphs g(dev, ops, cfg);
  step(g, 3, 40);  // the eager warm-up
  EXPECT_GT(g.stats().index_ms, 0);
  EXPECT_EQ(g.stats().launch_ms, 0);
  dev.replay_time = std::chrono::milliseconds(5);
  step(g, 3, 41);  // recorded and launched
  step(g, 3, 42);  // replayed
  EXPECT_GT(g.stats().index_ms, 0);
  EXPECT_GE(g.stats().launch_ms, 5);
  EXPECT_LT(g.stats().index_ms, g.stats().launch_ms + 1000);
  // Of the index build: the page maps' sync and the upload, each timed, inside it.
  EXPECT_GT(g.stats().sync_ms, 0);
  EXPECT_GT(g.stats().upload_ms, 0);
  EXPECT_LE(g.stats().sync_ms + g.stats().upload_ms, g.stats().index_ms);
  EXPECT_GT(g.stats().upload_bytes, 0);
  step(g, 3, 43, nullptr, /*record=*/false);  // eager again
  EXPECT_EQ(g.stats().launch_ms, 0);
}

TEST_F(StepGraphsTest, PaddedStepsAreNeverRecorded) {
  StepGraphs g(dev, ops, cfg);
  for (int i = 0; i < 4; ++i) step(g, 3, 40 + i, nullptr, /*record=*/false);
  EXPECT_EQ(bodies, 4);
  EXPECT_EQ(g.stats().eager, 4);
  EXPECT_EQ(g.stats().recorded, 0);
  EXPECT_EQ(dev.replays, 0);
}

TEST_F(StepGraphsTest, ShapesAreKeptApart) {
  StepGraphs g(dev, ops, cfg);
  for (int i = 0; i < 3; ++i) {
    step(g, 3, 40 + i);  // batch 4
    step(g, 6, 40 + i);  // batch 8
  }
  EXPECT_EQ(g.shapes(), 2u);
  EXPECT_EQ(g.stats().recorded, 2);
  EXPECT_EQ(g.stats().replayed, 2);
}

TEST_F(StepGraphsTest, MovedScratchMakesTheRecordingStale) {
  StepGraphs g(dev, ops, cfg);
  for (int i = 0; i < 3; ++i) step(g, 2, 40 + i);
  ops.epoch = 2;
  step(g, 2, 43);  // recorded again at once: the arena was already warm
  step(g, 2, 44);
  EXPECT_EQ(g.stats().dropped, 1);
  EXPECT_EQ(g.stats().recorded, 2);
  EXPECT_EQ(g.stats().replayed, 2);
}

TEST_F(StepGraphsTest, AnotherCacheMakesTheRecordingStale) {
  StepGraphs g(dev, ops, cfg);
  DenseKv other(dev, cfg, 24, 600);
  for (int i = 0; i < 3; ++i) step(g, 2, 40 + i);
  step(g, 2, 43, &other);
  EXPECT_EQ(g.stats().dropped, 1);
  EXPECT_EQ(g.stats().recorded, 2);
}

TEST_F(StepGraphsTest, GrowingTheSharedLogitsMakesOtherRecordingsStale) {
  StepGraphs g(dev, ops, cfg);
  for (int i = 0; i < 3; ++i) step(g, 2, 40 + i);
  step(g, 20, 43);  // batch 24 > the 8 rows the buffer starts with
  step(g, 2, 44);
  EXPECT_EQ(g.stats().dropped, 1);
  EXPECT_EQ(g.stats().recorded, 2);
}

TEST_F(StepGraphsTest, AFailedRecordingRunsEagerlyFromThenOn) {
  StepGraphs g(dev, ops, cfg);
  dev.fail_end = true;
  for (int i = 0; i < 4; ++i) step(g, 2, 40 + i);
  EXPECT_EQ(g.stats().failed, 1);
  EXPECT_EQ(g.stats().recorded, 0);
  EXPECT_EQ(g.stats().eager, 4);  // warm-up, the failed recording's rerun, then eager
  EXPECT_EQ(bodies, 5);           // the failed recording ran its body too
  EXPECT_FALSE(dev.recording);
}

TEST_F(StepGraphsTest, AFailedReplayRunsEagerly) {
  StepGraphs g(dev, ops, cfg);
  for (int i = 0; i < 3; ++i) step(g, 2, 40 + i);
  dev.fail_replay = true;
  const int before = bodies;
  step(g, 2, 43);
  EXPECT_EQ(bodies, before + 1);
  EXPECT_EQ(g.stats().failed, 1);
}

TEST_F(StepGraphsTest, TheLeastRecentlyUsedShapeIsDropped) {
  StepGraphs g(dev, ops, cfg, 2);
  for (int i = 0; i < 2; ++i) {
    step(g, 1, 40 + i);
    step(g, 2, 40 + i);
  }
  step(g, 3, 42);  // a third shape evicts batch 1
  EXPECT_EQ(g.shapes(), 2u);
  EXPECT_EQ(g.stats().dropped, 1);
  const int before = bodies;
  step(g, 1, 43);  // warms up again
  EXPECT_EQ(bodies, before + 1);
  EXPECT_EQ(g.stats().eager, 4);
}

TEST_F(StepGraphsTest, AContextCrossingABucketIsANewShape) {
  StepGraphs g(dev, ops, cfg);
  step(g, 2, 60);
  step(g, 2, 63);  // (63 + 1) / 4 = 16 keys: bucket 16
  step(g, 2, 67);  // 17 keys: bucket 32
  EXPECT_EQ(g.shapes(), 2u);
}

}  // namespace
}  // namespace dsv4
