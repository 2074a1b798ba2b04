// The bench serve picture: CDF points, throughput bins that keep every token, and the SVG's structure
// (panels with their plot areas and ranges, one polyline per series, escaped text).
#include "bench_client/bench_plot.h"

#include <gtest/gtest.h>

#include <random>
#include <regex>

#include "bench_client/svg_chart.h"

namespace dsv4::bench {
namespace {

std::vector<RequestRecord> random_records(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(0.001, 0.2);
  std::vector<RequestRecord> out(n);
  for (RequestRecord& r : out) {
    r.success = true;
    r.start = u(rng) * 10;
    r.ttft = u(rng);
    r.itl.resize(static_cast<size_t>(rng() % 20));
    double decode = 0;
    for (double& g : r.itl) decode += g = u(rng) / 10;
    r.output_tokens = static_cast<int64_t>(r.itl.size()) + 1;
    r.latency = r.ttft + decode;
  }
  return out;
}

TEST(BenchPlot, CdfIsSortedAndEndsAtOne) {
  const auto p = cdf_points({3, 1, 2, 2});
  ASSERT_EQ(p.size(), 4u);
  EXPECT_EQ(p.front(), (std::pair<double, double>{1, 0.25}));
  EXPECT_EQ(p[2], (std::pair<double, double>{2, 0.75}));
  EXPECT_EQ(p.back(), (std::pair<double, double>{3, 1.0}));
  EXPECT_TRUE(cdf_points({}).empty());
}

TEST(BenchPlot, ThroughputBinsKeepEveryToken) {
  const uint64_t seed = std::random_device{}();
  const auto records = random_records(seed, 50);
  double duration = 0;
  int64_t tokens = 0;
  for (const auto& r : records) {
    duration = std::max(duration, r.start + r.latency);
    tokens += r.output_tokens;
  }
  const double bin = 0.25;
  const auto pts = throughput_points(records, duration, bin);
  double sum = 0;
  for (const auto& [t, rate] : pts) sum += rate * bin;
  EXPECT_NEAR(sum, static_cast<double>(tokens), 1e-6) << "seed " << seed;
  EXPECT_EQ(pts.size(), static_cast<size_t>(std::ceil(duration / bin)));
}

TEST(SvgChart, PanelsAreasAndSeries) {
  BenchSettings s;
  s.base_url = "http://h<1>";
  s.endpoint = "/v1/chat/completions";
  const std::string svg = bench_plot_svg(random_records(std::random_device{}(), 30), s, 12);
  for (const char* id : {"ttft", "tpot", "itl", "throughput"}) {
    EXPECT_NE(svg.find("<g class=\"panel\" id=\"" + std::string(id) + "\">"), std::string::npos) << id;
  }
  for (const char* id : {"ttft-cdf", "tpot-cdf", "itl-cdf", "throughput-output"}) {
    EXPECT_NE(svg.find("id=\"" + std::string(id) + "\""), std::string::npos) << id;
  }
  const std::regex area("<rect class=\"plot-area\"");
  EXPECT_EQ(std::distance(std::sregex_iterator(svg.begin(), svg.end(), area), std::sregex_iterator()), 4);
  EXPECT_NE(svg.find("http://h&lt;1&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("h<1>"), std::string::npos);
  EXPECT_EQ(svg.rfind("</svg>\n"), svg.size() - 7);
}

}  // namespace
}  // namespace dsv4::bench
