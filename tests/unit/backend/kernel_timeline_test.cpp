// The kernel timeline's summary: a traced step's span, busy and idle time and per-kernel totals, judged
// against a brute-force walk over every nanosecond of random overlapping spans.
#include "backend/kernel_timeline.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

namespace dsv4 {
namespace {

using Span = Device::KernelSpan;

TEST(KernelTimeline, ShortNamesDropNamespacesReturnTypeAndParameters) {
  EXPECT_EQ(kernel_short_name("_ZN4dsv44cuda52_GLOBAL__N__fe0696c4_19_hyper_connection_cu_2121ff4318hc_mix_fast_"
                              "kernelILi1EEEvNS1_8HcLaunchEPf"),
            "hc_mix_fast_kernel<1>");
  EXPECT_EQ(kernel_short_name("_ZN4dsv44cuda45_GLOBAL__N__27341625_12_fast_gemv_cu_8b9fc80f16fast_gemv_"
                              "kernelILNS1_4FormE0ELi1ELi4EEEvNS0_14ExactBlockArgsE"),
            "fast_gemv_kernel<(Form)0, 1, 4>");
  EXPECT_EQ(kernel_short_name("_Z10add_kernelPfi"), "add_kernel");
  EXPECT_EQ(kernel_short_name("not_mangled"), "not_mangled");
  EXPECT_EQ(kernel_short_name("d"), "d");  // not the type double
}

TEST(KernelTimeline, TwoQueuesAndGaps) {
  // main: a [0, 10), b [15, 20); side: c [5, 18): busy [0, 20) = 20, idle 0; b's 5 us gap is covered by c.
  // Then d [30, 31): 10 idle before it.
  const std::vector<Span> step{
      {"a", 0, 10'000, 1}, {"c", 5'000, 18'000, 2}, {"b", 15'000, 20'000, 1}, {"d", 30'000, 31'000, 1}};
  const KernelTimeline t = summarize_timeline({step, step});
  EXPECT_EQ(t.steps, 2);
  EXPECT_DOUBLE_EQ(t.kernels, 4);
  EXPECT_DOUBLE_EQ(t.span_us, 31);
  EXPECT_DOUBLE_EQ(t.busy_us, 21);
  EXPECT_DOUBLE_EQ(t.idle_us(), 10);
  EXPECT_DOUBLE_EQ(t.sum_us, 10 + 13 + 5 + 1);
  // Shares in end order: a 10 (from the start), c 8, b 2, d 11: they add up to the span.
  ASSERT_EQ(t.by_time.size(), 4u);
  EXPECT_EQ(t.by_time[0].name, "d");
  EXPECT_DOUBLE_EQ(t.by_time[0].share_us, 11);
  EXPECT_DOUBLE_EQ(t.by_time[0].idle_before_us, 10);
  EXPECT_EQ(t.by_time[1].name, "a");
  EXPECT_DOUBLE_EQ(t.by_time[1].share_us, 10);
  EXPECT_DOUBLE_EQ(t.by_time[1].idle_before_us, 0);
  EXPECT_EQ(t.by_time[2].name, "c");
  EXPECT_DOUBLE_EQ(t.by_time[2].share_us, 8);
  EXPECT_DOUBLE_EQ(t.by_time[2].us, 13);
  EXPECT_EQ(t.by_time[3].name, "b");
  EXPECT_DOUBLE_EQ(t.by_time[3].share_us, 2);
  EXPECT_EQ(t.by_time[2].stream, 2u);
  // Each queue's own busy time: the main one 10 + 5 + 1, the side one 13.
  ASSERT_EQ(t.stream_busy_us.size(), 2u);
  EXPECT_EQ(t.stream_busy_us[0].first, 1u);
  EXPECT_DOUBLE_EQ(t.stream_busy_us[0].second, 16);
  EXPECT_DOUBLE_EQ(t.stream_busy_us[1].second, 13);
}

TEST(KernelTimeline, BusyTimeIsTheUnionOfRandomSpans) {
  std::mt19937 rng(std::random_device{}());
  for (int trial = 0; trial < 50; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<Span> step;
    for (int i = 0; i < n; ++i) {
      const uint64_t start = 1'000 + rng() % 5'000, len = rng() % 400;
      step.push_back({i % 3 == 0 ? "x" : "y", start, start + len, static_cast<uint32_t>(i % 2)});
    }
    std::vector<bool> on(7'000, false), on1(7'000, false);  // any queue, queue 1
    uint64_t first = ~uint64_t{0}, last = 0;
    double idle_x = 0;
    for (const Span& s : step) {
      for (uint64_t ns = s.start_ns; ns < s.end_ns; ++ns) on[ns] = true;
      for (uint64_t ns = s.start_ns; ns < s.end_ns && s.stream == 1; ++ns) on1[ns] = true;
      first = std::min(first, s.start_ns);
      last = std::max(last, s.end_ns);
    }
    // Idle before a call: nothing ran between the latest end of the spans starting earlier and its start.
    for (const Span& s : step) {
      if (s.name != "x") continue;
      uint64_t covered = first;
      bool earliest = true;
      for (const Span& o : step) {
        if (&o == &s) continue;
        if (o.start_ns < s.start_ns || (o.start_ns == s.start_ns && &o < &s)) {
          covered = std::max(covered, o.end_ns);
          earliest = false;
        }
      }
      if (!earliest && s.start_ns > covered) idle_x += static_cast<double>(s.start_ns - covered) / 1e3;
    }
    const double busy = static_cast<double>(std::count(on.begin(), on.end(), true)) / 1e3;
    const KernelTimeline t = summarize_timeline({step});
    EXPECT_NEAR(t.busy_us, busy, 1e-9) << "trial " << trial;
    for (const auto& [stream, us] : t.stream_busy_us) {
      if (stream == 1) {
        EXPECT_NEAR(us, static_cast<double>(std::count(on1.begin(), on1.end(), true)) / 1e3, 1e-9);
      }
    }
    EXPECT_NEAR(t.span_us, static_cast<double>(last - first) / 1e3, 1e-9);
    double idle = 0, shares = 0;
    for (const KernelTotal& k : t.by_time) {
      idle += k.name == "x" ? k.idle_before_us : 0;
      shares += k.share_us;
    }
    EXPECT_NEAR(idle, idle_x, 1e-9) << "trial " << trial;
    EXPECT_NEAR(shares, t.span_us, 1e-9) << "trial " << trial;
  }
}

TEST(KernelTimeline, HostDeviceKeepsNoTimeline) {
  HostDevice dev;
  EXPECT_FALSE(dev.start_trace());
  EXPECT_TRUE(dev.stop_trace().empty());
  EXPECT_FALSE(dev.trace_unavailable().empty());
}

}  // namespace
}  // namespace dsv4
