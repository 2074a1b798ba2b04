// The model runner's overlap of a step's forward with its sample inputs (HostWorker): both run at once,
// errors come back, and a constrained row's mask is made on the worker while the forward runs, so a slow
// mask costs the step max(forward, mask) instead of their sum.
#include "engine/host_worker.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include "engine_test_support.h"

namespace dsv4 {
namespace {

using namespace enginetest;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

TEST(HostWorker, RunsTheSideWorkBesideTheMainWork) {
  HostWorker w;
  for (int round = 0; round < 3; ++round) {
    std::atomic<bool> side_done{false};
    const auto t0 = Clock::now();
    const int r = w.beside(
        [&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(150));
          side_done = true;
        },
        [] {
          std::this_thread::sleep_for(std::chrono::milliseconds(150));
          return 7;
        });
    EXPECT_EQ(r, 7);
    EXPECT_TRUE(side_done);
    EXPECT_LT(ms_since(t0), 280) << "the two sleeps ran one after the other";
  }
}

TEST(HostWorker, ErrorsComeBackAndTheSideIsAlwaysWaitedFor) {
  HostWorker w;
  EXPECT_THROW(w.beside([] { throw std::runtime_error("side"); }, [] { return 1; }), std::runtime_error);
  std::atomic<bool> side_done{false};
  try {
    w.beside(
        [&] {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          side_done = true;
        },
        []() -> int { throw Error("main"); });
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "main");
  }
  EXPECT_TRUE(side_done);
  EXPECT_EQ(w.beside([] {}, [] { return 2; }), 2);  // usable after both
}

// Allows every id; allowed() takes `delay` and notes the thread it ran on.
struct SlowConstraint : TokenConstraint {
  std::vector<uint32_t> all;
  std::chrono::milliseconds delay;
  std::thread::id* thread;
  std::span<const uint32_t> allowed() override {
    std::this_thread::sleep_for(delay);
    *thread = std::this_thread::get_id();
    return all;
  }
  bool accept(int32_t) override { return true; }
  void rollback(size_t) override {}
};
struct SlowFactory : TokenConstraintFactory {
  int64_t vocab = 0;
  std::chrono::milliseconds delay{0};
  std::thread::id* thread = nullptr;
  std::unique_ptr<TokenConstraint> make() const override {
    auto c = std::make_unique<SlowConstraint>();
    c->all.assign(static_cast<size_t>((vocab + 31) / 32), ~0u);
    c->delay = delay;
    c->thread = thread;
    return c;
  }
};

// The milliseconds of one prefill step of `prompt` for a sampling request with `params`.
double step_ms(const SamplingParams& params, const std::vector<int32_t>& prompt) {
  TinyRunner t(base_config());
  t.kv.add_request(1, static_cast<int64_t>(prompt.size()));
  t.runner.add_request(1, params, prompt, 1);
  EXPECT_TRUE(t.kv.allocate(1, static_cast<int64_t>(prompt.size()), prompt));
  Schedule s;
  s.chunks.push_back({1, 0, prompt, true, false});
  const auto t0 = Clock::now();
  EXPECT_EQ(t.runner.execute(s).size(), 1u);
  return ms_since(t0);
}

TEST(ModelRunnerOverlap, AConstrainedRowsMaskIsMadeWhileTheForwardRuns) {
  const std::vector<int32_t> prompt = random_ids(384, 3);
  SamplingParams plain;
  plain.temperature = 1.0;
  plain.max_tokens = 4;
  step_ms(plain, prompt);  // warm
  double forward = 1e9;
  for (int i = 0; i < 3; ++i) forward = std::min(forward, step_ms(plain, prompt));
  auto slow = std::make_shared<SlowFactory>();
  std::thread::id mask_thread;
  slow->vocab = tiny_model().config.vocab_size;
  slow->delay = std::chrono::milliseconds(static_cast<int64_t>(forward));
  slow->thread = &mask_thread;
  SamplingParams constrained = plain;
  constrained.constraint = slow;
  double both = 1e9;
  for (int i = 0; i < 3; ++i) both = std::min(both, step_ms(constrained, prompt));
  EXPECT_NE(mask_thread, std::this_thread::get_id()) << "the mask was made on the engine's own thread";
  // Serial would be 2 x forward; overlapped it is about 1 x (plus the sample op and hand-offs).
  EXPECT_LT(both, 1.6 * forward) << "forward " << forward << " ms, mask " << slow->delay.count() << " ms";
}

}  // namespace
}  // namespace dsv4
