#include "bench_client/bench_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dsv4::bench {
namespace {

using OJson = nlohmann::ordered_json;

double mean(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

double stddev(const std::vector<double>& v) {  // population, as numpy.std
  if (v.empty()) return 0;
  const double m = mean(v);
  double s = 0;
  for (const double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / static_cast<double>(v.size()));
}

BenchSummary::Stat stat(std::string key, std::string name, const std::vector<double>& seconds,
                        const std::vector<double>& percentiles) {
  std::vector<double> ms(seconds.size());
  std::transform(seconds.begin(), seconds.end(), ms.begin(), [](double s) { return s * 1000; });
  BenchSummary::Stat st{std::move(key), std::move(name), mean(ms), percentile(ms, 50), stddev(ms), {}};
  for (const double p : percentiles) st.percentiles.emplace_back(p, percentile(ms, p));
  return st;
}

// "99" for 99.0, "99.9" otherwise (vLLM's p_word).
std::string p_word(double p) {
  return p == std::floor(p) ? fmt::format("{}", static_cast<int64_t>(p)) : fmt::format("{}", p);
}

std::string line(const std::string& label, const std::string& value) {
  return fmt::format("{:<40} {:<10}\n", label, value);
}
std::string line(const std::string& label, double value) { return fmt::format("{:<40} {:<10.2f}\n", label, value); }
// Python's "{:=^50}": the title centered, the odd fill character on the right.
std::string banner(const std::string& title, char fill) {
  const size_t pad = title.size() < 50 ? 50 - title.size() : 0;
  return std::string(pad / 2, fill) + title + std::string(pad - pad / 2, fill) + "\n";
}

const char* section_title(const std::string& key) {
  if (key == "ttft") return "Time to First Token";
  if (key == "tpot") return "Time per Output Token (excl. 1st token)";
  if (key == "itl") return "Inter-token Latency";
  return "End-to-end Latency";
}

}  // namespace

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = p / 100 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (values[hi] - values[lo]) * (rank - static_cast<double>(lo));
}

BenchSummary summarize(const std::vector<RequestRecord>& records, double duration, int64_t peak_concurrency,
                       const std::vector<double>& percentiles) {
  BenchSummary s;
  s.duration = duration;
  s.peak_concurrency = peak_concurrency;
  std::vector<double> ttft, tpot, itl, e2el;
  for (const RequestRecord& r : records) {
    if (!r.success) {
      ++s.failed;
      continue;
    }
    ++s.completed;
    s.total_input += r.prompt_len;
    s.total_output += r.output_tokens;
    s.total_cached += r.cached_tokens;
    ttft.push_back(r.ttft);
    e2el.push_back(r.latency);
    if (r.output_tokens > 1) tpot.push_back((r.latency - r.ttft) / static_cast<double>(r.output_tokens - 1));
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
  }
  const double d = std::max(duration, 1e-9);
  s.request_throughput = static_cast<double>(s.completed) / d;
  s.output_throughput = static_cast<double>(s.total_output) / d;
  s.total_token_throughput = static_cast<double>(s.total_input + s.total_output) / d;
  s.hit_rate = s.total_input > 0 ? static_cast<double>(s.total_cached) / static_cast<double>(s.total_input) : 0;
  s.stats = {stat("ttft", "TTFT", ttft, percentiles), stat("tpot", "TPOT", tpot, percentiles),
             stat("itl", "ITL", itl, percentiles), stat("e2el", "E2EL", e2el, percentiles)};
  return s;
}

void add_ideal_hit_rate(BenchSummary& s, const std::vector<RequestRecord>& records, const std::vector<int64_t>& ideal) {
  int64_t cached = 0, input = 0;
  for (size_t i = 0; i < records.size() && i < ideal.size(); ++i) {
    if (!records[i].success) continue;
    cached += ideal[i];
    input += records[i].prompt_len;
  }
  s.ideal_hit_rate = input > 0 ? static_cast<double>(cached) / static_cast<double>(input) : 0;
}

std::string format_report(const BenchSummary& s, const BenchSettings& settings) {
  std::string out = banner(" Serving Benchmark Result ", '=');
  out += line("Successful requests:", std::to_string(s.completed));
  out += line("Failed requests:", std::to_string(s.failed));
  if (settings.max_concurrency > 0)
    out += line("Maximum request concurrency:", std::to_string(settings.max_concurrency));
  out += line("Request rate configured (RPS):",
              settings.request_rate > 0 ? fmt::format("{:.2f}", settings.request_rate) : "inf");
  out += line("Benchmark duration (s):", s.duration);
  out += line("Total input tokens:", std::to_string(s.total_input));
  out += line("Total generated tokens:", std::to_string(s.total_output));
  out += line("Request throughput (req/s):", s.request_throughput);
  out += line("Output token throughput (tok/s):", s.output_throughput);
  out += line("Peak concurrent requests:", std::to_string(s.peak_concurrency));
  out += line("Total Token throughput (tok/s):", s.total_token_throughput);
  out += line("Prefix cache hit rate (%):", s.hit_rate * 100);
  if (s.ideal_hit_rate >= 0) {
    out += line("Ideal prefix cache hit rate (%):", s.ideal_hit_rate * 100);
    if (s.ideal_hit_rate > 0) out += line("Hit rate / ideal (%):", s.hit_rate / s.ideal_hit_rate * 100);
  }
  for (const auto& st : s.stats) {
    out += banner(section_title(st.key), '-');
    out += line(fmt::format("Mean {} (ms):", st.name), st.mean);
    out += line(fmt::format("Median {} (ms):", st.name), st.median);
    for (const auto& [p, v] : st.percentiles) out += line(fmt::format("P{} {} (ms):", p_word(p), st.name), v);
  }
  out += std::string(50, '=') + "\n";
  return out;
}

OJson report_json(const BenchSummary& s, const BenchSettings& settings, const std::vector<RequestRecord>& records) {
  OJson j;
  j["backend"] = "openai";
  j["base_url"] = settings.base_url;
  j["endpoint"] = settings.endpoint;
  j["model_id"] = settings.model;
  j["num_prompts"] = settings.num_prompts;
  j["request_rate"] = settings.request_rate > 0 ? OJson(settings.request_rate) : OJson("inf");
  j["burstiness"] = settings.burstiness;
  j["max_concurrency"] = settings.max_concurrency > 0 ? OJson(settings.max_concurrency) : OJson();
  j["duration"] = s.duration;
  j["completed"] = s.completed;
  j["failed"] = s.failed;
  j["total_input_tokens"] = s.total_input;
  j["total_output_tokens"] = s.total_output;
  j["request_throughput"] = s.request_throughput;
  j["output_throughput"] = s.output_throughput;
  j["total_token_throughput"] = s.total_token_throughput;
  j["max_concurrent_requests"] = s.peak_concurrency;
  j["dataset_name"] = settings.dataset;
  j["total_cached_tokens"] = s.total_cached;
  j["prefix_cache_hit_rate"] = s.hit_rate;
  j["ideal_prefix_cache_hit_rate"] = s.ideal_hit_rate >= 0 ? OJson(s.ideal_hit_rate) : OJson();
  for (const auto& st : s.stats) {
    j[fmt::format("mean_{}_ms", st.key)] = st.mean;
    j[fmt::format("median_{}_ms", st.key)] = st.median;
    j[fmt::format("std_{}_ms", st.key)] = st.std;
    for (const auto& [p, v] : st.percentiles) j[fmt::format("p{}_{}_ms", p_word(p), st.key)] = v;
  }
  OJson in = OJson::array(), out = OJson::array(), ttfts = OJson::array(), itls = OJson::array(),
        errors = OJson::array(), cached = OJson::array(), starts = OJson::array(), latencies = OJson::array();
  for (const RequestRecord& r : records) {
    in.push_back(r.prompt_len);
    out.push_back(r.output_tokens);
    ttfts.push_back(r.ttft);
    itls.push_back(r.itl);
    errors.push_back(r.error);
    cached.push_back(r.cached_tokens);
    starts.push_back(r.start);
    latencies.push_back(r.latency);
  }
  j["input_lens"] = std::move(in);
  j["output_lens"] = std::move(out);
  j["ttfts"] = std::move(ttfts);
  j["itls"] = std::move(itls);
  j["errors"] = std::move(errors);
  j["cached_tokens"] = std::move(cached);
  j["start_times"] = std::move(starts);
  j["e2els"] = std::move(latencies);
  return j;
}

}  // namespace dsv4::bench
