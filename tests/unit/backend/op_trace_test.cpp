// OpTrace and OpProfile: the debugging decorators around a backend. A trace must name the first call
// whose outputs differ between two runs; a profile must count every call it waited for.
#include "backend/op_trace.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>

#include "backend/cpu/cpu_ops.h"
#include "backend/op_profile.h"
#include "core/error.h"
#include "core/number_formats.h"

namespace dsv4 {
namespace {

std::vector<uint16_t> random_row(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(d(rng));
  return v;
}

// Two rms_norm calls and a head norm; `bump` changes one input element of the second rms_norm.
std::vector<OpRecord> trace(bool bump) {
  HostDevice dev;
  CpuOps cpu(1);
  OpTrace t(cpu, dev);
  const int64_t dim = 64;
  auto x = random_row(2 * dim, 1), w = random_row(dim, 2), y = std::vector<uint16_t>(x.size());
  t.rms_norm({.x = x.data(), .y = y.data(), .weight = w.data(), .rows = 2, .dim = dim});
  if (bump) x[5] = float_to_bf16(bf16_to_float(x[5]) * 4);
  t.rms_norm({.x = x.data(), .y = y.data(), .weight = w.data(), .rows = 2, .dim = dim});
  t.head_rms_norm({.x = y.data(), .rows = 2, .heads = 2, .head_dim = 32});
  return t.records();
}

TEST(OpTrace, RecordsEveryDenseOutput) {
  const auto r = trace(false);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].op, "rms_norm");
  EXPECT_EQ(r[2].op, "head_rms_norm");
  EXPECT_EQ(r[0].bytes.size(), 2u * 64 * 2);
}

TEST(OpTrace, IdenticalRunsCompareClean) { EXPECT_TRUE(compare_traces(trace(false), trace(false)).empty()); }

TEST(OpTrace, NamesTheFirstCallThatDiffers) {
  const auto lines = compare_traces(trace(true), trace(false));
  ASSERT_GE(lines.size(), 2u);
  EXPECT_NE(lines[0].find("call     1 rms_norm"), std::string::npos) << lines[0];
  EXPECT_NE(lines[1].find("head_rms_norm"), std::string::npos) << lines[1];
}

TEST(OpTrace, ShapeMismatchStops) {
  auto a = trace(false), b = trace(false);
  b[1].op = "rope";
  const auto lines = compare_traces(a, b);
  ASSERT_FALSE(lines.empty());
  EXPECT_NE(lines[0].find("diverge"), std::string::npos) << lines[0];
}

// Replaying: each call's outputs are overwritten by the earlier run's record, so the next op reads
// that run's values; the trace itself keeps what this run computed.
TEST(OpTraceReplay, FeedsEachOpTheEarlierRunsOutputs) {
  const auto exact = trace(false);
  HostDevice dev;
  CpuOps cpu(1);
  OpTrace t(cpu, dev, &exact);
  const int64_t dim = 64;
  auto x = random_row(2 * dim, 1), w = random_row(dim, 2), y = std::vector<uint16_t>(x.size());
  x[3] = float_to_bf16(bf16_to_float(x[3]) * 8);  // this run's first output differs ...
  t.rms_norm({.x = x.data(), .y = y.data(), .weight = w.data(), .rows = 2, .dim = dim});
  EXPECT_NE(t.records()[0].bytes, exact[0].bytes);
  EXPECT_EQ(0, std::memcmp(y.data(), exact[0].bytes.data(), exact[0].bytes.size()));  // ... and was replaced
  t.rms_norm({.x = x.data(), .y = y.data(), .weight = w.data(), .rows = 2, .dim = dim});
  t.head_rms_norm({.x = y.data(), .rows = 2, .heads = 2, .head_dim = 32});
  const ReplayVerdict v = judge_replay(t.records(), exact);
  EXPECT_FALSE(v.pass);  // rms_norm has no sums the fast tier may change: its bits are the gate
  EXPECT_NE(v.lines[0].find("call     0 rms_norm"), std::string::npos) << v.lines[0];
  EXPECT_EQ(t.records()[2].bytes, exact[2].bytes);  // fed the exact input, head_rms_norm is exact again
}

TEST(OpTraceReplay, RefusesACallOfAnotherShape) {
  const auto exact = trace(false);
  HostDevice dev;
  CpuOps cpu(1);
  OpTrace t(cpu, dev, &exact);
  auto y = random_row(64, 3);
  EXPECT_THROW(t.head_rms_norm({.x = y.data(), .rows = 1, .heads = 2, .head_dim = 32}), Error);
}

// One record of `n` values under a gate, and a copy with `changed` of them moved by `rel`.
std::pair<OpRecord, OpRecord> gated_pair(ReplayGate gate, TraceElem elem, size_t n, size_t changed, double rel) {
  OpRecord a{"op", elem, std::vector<uint8_t>(n * (elem == TraceElem::kBf16 ? 2 : 4)), 64, gate};
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (size_t i = 0; i < n; ++i) {
    if (elem == TraceElem::kI32) {
      const auto v = static_cast<int32_t>(i);
      std::memcpy(a.bytes.data() + 4 * i, &v, 4);
    } else {
      const float v = d(rng);
      std::memcpy(a.bytes.data() + 4 * i, &v, 4);
    }
  }
  OpRecord b = a;
  for (size_t i = 0; i < changed; ++i) {
    if (elem == TraceElem::kI32) {
      const int32_t v = -1;
      std::memcpy(b.bytes.data() + 4 * (i * 7 % n), &v, 4);
    } else {
      float v;
      std::memcpy(&v, b.bytes.data() + 4 * (i * 7 % n), 4);
      v = static_cast<float>(v * (1 + rel));
      std::memcpy(b.bytes.data() + 4 * (i * 7 % n), &v, 4);
    }
  }
  return {b, a};
}

bool passes(const std::pair<OpRecord, OpRecord>& p) { return judge_replay({p.first}, {p.second}).pass; }

// Each gate passes what a correct fast op does and fails a mutation just past its bound.
TEST(OpTraceReplay, EachGateHasItsBound) {
  using G = ReplayGate;
  using E = TraceElem;
  // Sums of 8-bit products: every value off by 2^-9 relative (calc_diff ~1e-6) passes; a lost term
  // (one value in 64 off by half) fails.
  EXPECT_TRUE(passes(gated_pair(G::kLowSums, E::kF32, 4096, 4096, 0x1p-9)));
  EXPECT_FALSE(passes(gated_pair(G::kLowSums, E::kF32, 4096, 64, 0.5)));
  // fp32 sums: off by a few fp32 ulps passes; by 2^-12 relative fails.
  EXPECT_TRUE(passes(gated_pair(G::kFp32Sums, E::kF32, 4096, 4096, 0x1p-22)));
  EXPECT_FALSE(passes(gated_pair(G::kFp32Sums, E::kF32, 4096, 4096, 0x1p-12)));
  // Selections: 1% of indices may differ (near-ties), 5% may not.
  EXPECT_TRUE(passes(gated_pair(G::kSelection, E::kI32, 1000, 10, 0)));
  EXPECT_FALSE(passes(gated_pair(G::kSelection, E::kI32, 1000, 50, 0)));
  // Exact ops: one value in 4096 off by one fp32 ulp fails.
  EXPECT_TRUE(passes(gated_pair(G::kBits, E::kF32, 4096, 0, 0)));
  EXPECT_FALSE(passes(gated_pair(G::kBits, E::kF32, 4096, 1, 0x1p-23)));
}

TEST(OpProfile, CountsCallsOnlyWhileEnabled) {
  HostDevice dev;
  CpuOps cpu(1);
  OpProfile prof(cpu, dev);
  const int64_t dim = 64;
  auto x = random_row(dim, 3), w = random_row(dim, 4), y = std::vector<uint16_t>(x.size());
  const RmsNormParams p{.x = x.data(), .y = y.data(), .weight = w.data(), .rows = 1, .dim = dim};
  prof.rms_norm(p);
  EXPECT_TRUE(prof.totals().empty());
  prof.enable(true);
  prof.rms_norm(p);
  prof.rms_norm(p);
  prof.head_rms_norm({.x = y.data(), .rows = 1, .heads = 2, .head_dim = 32});
  prof.enable(false);
  prof.rms_norm(p);
  const auto t = prof.totals();
  ASSERT_EQ(t.size(), 2u);
  for (const OpTime& o : t) EXPECT_EQ(o.calls, o.op == "rms_norm" ? 2 : 1) << o.op;
  EXPECT_NE(y, std::vector<uint16_t>(y.size()));  // the ops really ran through the wrapper
}

// Each op's host time is the wall time of its calls: an op that holds the host (here a sleeping one)
// shows it, summed over its calls, beside its device time.
TEST(OpProfile, SumsEachOpsHostTime) {
  struct SlowNorms final : Ops {  // the CPU's ops, rms_norm holding the host 4 ms a call
    explicit SlowNorms(Ops& in) : inner(in) {}
    uint64_t scratch_epoch() const override { return inner.scratch_epoch(); }
#define DSV4_SLOW_OP(name, P)                                                                             \
  void do_##name(const P##Params& p) override {                                                          \
    if (std::string_view(#name) == "rms_norm") std::this_thread::sleep_for(std::chrono::milliseconds(4)); \
    inner.name(p);                                                                                        \
  }
    DSV4_FOR_EACH_OP(DSV4_SLOW_OP)
#undef DSV4_SLOW_OP
    Ops& inner;
  };
  CpuOps cpu(1);
  SlowNorms slow(cpu);
  HostDevice dev;
  OpProfile prof(slow, dev);
  const int64_t dim = 64;
  auto x = random_row(dim, 3), w = random_row(dim, 4), y = std::vector<uint16_t>(x.size());
  prof.enable(true);
  prof.rms_norm({.x = x.data(), .y = y.data(), .weight = w.data(), .rows = 1, .dim = dim});
  prof.rms_norm({.x = x.data(), .y = y.data(), .weight = w.data(), .rows = 1, .dim = dim});
  prof.head_rms_norm({.x = y.data(), .rows = 1, .heads = 2, .head_dim = 32});
  prof.enable(false);
  for (const OpTime& o : prof.totals()) {
    if (o.op == "rms_norm") {
      EXPECT_GE(o.host_ms, 8.0);
    } else {
      EXPECT_LT(o.host_ms, 4.0) << o.op;
    }
  }
}

TEST(OpProfile, NamesEachLinearByWeightKindAndShape) {
  HostDevice dev;
  CpuOps cpu(1);
  OpProfile prof(cpu, dev);
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> w(8 * 16);
  for (auto& v : w) v = d(rng);
  const auto x = random_row(2 * 32, 6);
  std::vector<float> y(2 * 16);
  prof.enable(true);
  prof.linear({.x = x.data(), .rows = 2, .w = Weight::f32(w.data(), 8, 16), .y = y.data(), .y_type = ActType::kF32});
  prof.linear({.x = x.data(),
               .rows = 2,
               .w = Weight::f32(w.data(), 8, 16),
               .y = y.data(),
               .y_type = ActType::kF32,
               .groups = 2});
  prof.enable(false);
  std::vector<std::string> names;
  for (const OpTime& o : prof.totals()) names.push_back(o.op);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"linear f32 8x16", "linear f32 8x16 x2"}));
}

// Host devices time marks with the host clock: the time between two marks, read after synchronize().
TEST(DeviceMarks, HostMarksMeasureTheTimeBetweenThem) {
  HostDevice dev;
  const size_t a = dev.mark();
  std::this_thread::sleep_for(std::chrono::milliseconds(3));
  const size_t b = dev.mark();
  dev.synchronize();
  EXPECT_GE(dev.elapsed_ms(a, b), 3.0);
  EXPECT_LE(dev.elapsed_ms(b, b), 0.0);
  dev.clear_marks();
  EXPECT_THROW((void)dev.elapsed_ms(a, b), std::out_of_range);
}

// The sample op through both decorators: traced as tokens and top ids, timed as "sample".
TEST(OpTrace, SampleIsForwardedTracedAndTimed) {
  HostDevice dev;
  CpuOps cpu(1);
  OpTrace trace(cpu, dev);
  OpProfile prof(trace, dev);
  prof.enable(true);
  const std::vector<float> x = {0.5f, 3.0f, 1.0f, 2.0f, -1.0f, 0.0f, 4.0f, 1.0f};
  SampleRow rows[2];
  rows[0].logprobs = 2;
  rows[1].temperature = 1.0;
  rows[1].u = 0.25;
  int32_t token[2] = {-1, -1}, top_id[4] = {};
  double logprob[2] = {}, top_logprob[4] = {};
  prof.sample({.x = x.data(),
               .rows = 2,
               .cols = 4,
               .limit = 4,
               .row = rows,
               .token = token,
               .logprob = logprob,
               .top_width = 2,
               .top_id = top_id,
               .top_logprob = top_logprob});
  EXPECT_EQ(token[0], 1);
  EXPECT_EQ(top_id[0], 1);
  EXPECT_EQ(top_id[1], 3);
  ASSERT_EQ(trace.records().size(), 2u);
  EXPECT_EQ(trace.records()[0].op, "sample");
  EXPECT_EQ(trace.records()[1].op, "sample.top_id");
  ASSERT_EQ(prof.totals().size(), 1u);
  EXPECT_EQ(prof.totals()[0].op, "sample");
}

}  // namespace
}  // namespace dsv4
