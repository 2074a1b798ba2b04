// The picture of a `bench serve` run, as an SVG (svg_chart.h): the cumulative distributions of TTFT,
// TPOT and ITL (the share of requests, or gaps, at or below each latency), and the output throughput
// over the run in time bins, so that warm-up, saturation and stragglers show at a glance.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "bench_client/bench_report.h"

namespace dsv4::bench {

// Sorted values with their cumulative share: (v_i, (i + 1) / n).
std::vector<std::pair<double, double>> cdf_points(std::vector<double> values);

// Output tokens per second in bins of `bin` seconds over [0, duration]: (bin middle, rate). Each request's
// tokens are spread over its streamed chunks (first at start + ttft, then one per inter-chunk gap).
std::vector<std::pair<double, double>> throughput_points(const std::vector<RequestRecord>& records, double duration,
                                                         double bin);

std::string bench_plot_svg(const std::vector<RequestRecord>& records, const BenchSettings& settings, double duration);

}  // namespace dsv4::bench
