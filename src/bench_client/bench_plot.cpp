#include "bench_client/bench_plot.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "bench_client/svg_chart.h"

namespace dsv4::bench {
namespace {

struct Latencies {
  std::vector<double> ttft, tpot, itl;  // milliseconds
};

Latencies latencies_ms(const std::vector<RequestRecord>& records) {
  Latencies l;
  for (const RequestRecord& r : records) {
    if (!r.success) continue;
    l.ttft.push_back(r.ttft * 1000);
    if (r.output_tokens > 1) l.tpot.push_back((r.latency - r.ttft) * 1000 / static_cast<double>(r.output_tokens - 1));
    for (const double g : r.itl) l.itl.push_back(g * 1000);
  }
  return l;
}

ChartPanel cdf_panel(const std::string& id, const std::string& title, const std::vector<double>& ms,
                     const std::string& color) {
  std::string label = id;  // the legend: "TTFT", short enough for the panel's corner
  for (char& c : label) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return {id, title, "milliseconds", "share at or below", {{"cdf", label, color, cdf_points(ms)}}};
}

// About 40 bins over the run, never finer than 0.1 s.
double bin_width(double duration) { return std::max(0.1, duration / 40); }

}  // namespace

std::vector<std::pair<double, double>> cdf_points(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  std::vector<std::pair<double, double>> out;
  out.reserve(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    out.emplace_back(values[i], static_cast<double>(i + 1) / static_cast<double>(values.size()));
  }
  return out;
}

std::vector<std::pair<double, double>> throughput_points(const std::vector<RequestRecord>& records, double duration,
                                                         double bin) {
  const auto bins = static_cast<size_t>(std::max(1.0, std::ceil(duration / bin)));
  std::vector<double> tokens(bins, 0);
  const auto add = [&](double t, double n) {
    const auto b = static_cast<size_t>(std::clamp(std::floor(t / bin), 0.0, static_cast<double>(bins - 1)));
    tokens[b] += n;
  };
  for (const RequestRecord& r : records) {
    if (!r.success || r.output_tokens == 0) continue;
    const double per_chunk = static_cast<double>(r.output_tokens) / static_cast<double>(r.itl.size() + 1);
    double t = r.start + r.ttft;
    add(t, per_chunk);
    for (const double g : r.itl) add(t += g, per_chunk);
  }
  std::vector<std::pair<double, double>> out;
  for (size_t b = 0; b < bins; ++b) out.emplace_back((static_cast<double>(b) + 0.5) * bin, tokens[b] / bin);
  return out;
}

std::string bench_plot_svg(const std::vector<RequestRecord>& records, const BenchSettings& settings, double duration) {
  const Latencies l = latencies_ms(records);
  std::vector<ChartPanel> panels = {
      cdf_panel("ttft", "Time to first token", l.ttft, "#1f77b4"),
      cdf_panel("tpot", "Time per output token (excl. 1st)", l.tpot, "#ff7f0e"),
      cdf_panel("itl", "Inter-token latency", l.itl, "#2ca02c"),
      {"throughput",
       "Output throughput over time",
       "seconds since start",
       "tokens/s",
       {{"output", "output tok/s", "#d62728", throughput_points(records, duration, bin_width(duration))}}},
  };
  const std::string title = fmt::format("dsv4 bench serve: {} {} ({}, {} prompts)", settings.base_url,
                                        settings.endpoint, settings.dataset, settings.num_prompts);
  return render_svg(title, panels);
}

}  // namespace dsv4::bench
