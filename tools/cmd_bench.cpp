// dsv4 bench serve: the serving benchmark client (vLLM's `vllm bench serve` flags and result block) against
// any OpenAI-compatible server. dsv4 bench latency: llama-bench-style prompt processing (ppN) and text
// generation (tgN) rates of one request through the engine, as a markdown table. dsv4 bench step:
// tools/bench_step.cpp.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <thread>

#include "bench_client/bench_dataset.h"
#include "bench_client/bench_plot.h"
#include "bench_client/bench_report.h"
#include "bench_client/bench_runner.h"
#include "bench_client/ideal_prefix_hits.h"
#include "bench_client/jsonl_dataset.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/model_loader.h"
#include "model_tools/default_model.h"
#include "tools/bench_comm.h"
#include "tools/bench_step.h"
#include "tools/command.h"
#include "tools/engine_flags.h"
#include "tools/load_flags.h"

namespace dsv4::tools {
namespace {

using Clock = std::chrono::steady_clock;

// ---- bench serve ---------------------------------------------------------------------------------------

struct ServeArgs {
  std::string base_url = "http://127.0.0.1:8000", endpoint = "/v1/completions", model, dataset = "random";
  std::string request_rate = "inf", percentiles = "50,90,95,99", api_key, result_file;
  std::string dataset_path, result_dir, result_filename, plot_file;
  bench::RandomDatasetOptions data;
  bench::PrefixRepetitionOptions prefix;
  int64_t custom_output_len = 256;
  double burstiness = 1, temperature = 0;
  int64_t max_concurrency = 0;
  bool json = false, ignore_eos = false, no_progress = false, save_result = false;
};

std::vector<double> parse_percentiles(const std::string& s) {
  std::vector<double> out = parse_number_list(s, "--metric-percentiles");
  for (const double p : out) DSV4_CHECK(p >= 0 && p <= 100, "--metric-percentiles: {} is not in [0, 100]", p);
  return out;
}

double parse_rate(const std::string& s) {
  if (s == "inf") return 0;
  try {
    const double r = std::stod(s);
    DSV4_CHECK(r > 0, "--request-rate must be positive or inf, got {}", s);
    return r;
  } catch (const std::logic_error&) {
    fail("--request-rate must be a number or inf, got \"{}\"", s);
  }
}

std::vector<bench::BenchRequest> make_dataset(ServeArgs& a, int32_t vocab_size) {
  if (a.dataset == "random") {
    if (vocab_size > 0) a.data.vocab_size = vocab_size;
    return bench::random_dataset(a.data);
  }
  if (a.dataset == "prefix_repetition") {
    a.prefix.num_prompts = a.data.num_prompts;
    a.prefix.seed = a.data.seed;
    if (vocab_size > 0) a.prefix.vocab_size = vocab_size;
    return bench::prefix_repetition_dataset(a.prefix);
  }
  DSV4_CHECK(a.dataset == "custom", "--dataset-name {}: random, prefix_repetition or custom", a.dataset);
  DSV4_CHECK(!a.dataset_path.empty(), "--dataset-name custom needs --dataset-path (a JSONL file)");
  return bench::jsonl_dataset(a.dataset_path, a.custom_output_len, a.data.num_prompts);
}

// vLLM's name for --save-result: {backend}-{rate}qps[-concurrency{c}]-{model}-{date}.json.
std::string default_result_filename(const ServeArgs& a, const std::string& model, bool chat) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char date[32];
  std::strftime(date, sizeof date, "%Y%m%d-%H%M%S", &tm);
  const std::string base_model =
      model.substr(model.find_last_of('/') == std::string::npos ? 0 : model.find_last_of('/') + 1);
  return fmt::format("{}-{}qps{}-{}-{}.json", chat ? "openai-chat" : "openai", a.request_rate,
                     a.max_concurrency > 0 ? fmt::format("-concurrency{}", a.max_concurrency) : "", base_model, date);
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  DSV4_CHECK(f.good(), "bench: cannot write {}", path);
  f << text;
  spdlog::info("bench: wrote {}", path);
}

// --result-file, --save-result (with --result-dir, --result-filename; an SVG beside it), --plot.
void write_results(const ServeArgs& a, const bench::BenchSettings& settings, const bench::BenchRun& run,
                   const nlohmann::ordered_json& j) {
  const std::string svg = bench::bench_plot_svg(run.records, settings, run.duration);
  if (!a.result_file.empty()) write_file(a.result_file, j.dump(2) + "\n");
  if (a.save_result) {
    const std::string name = a.result_filename.empty()
                                 ? default_result_filename(a, settings.model, bench::is_chat_endpoint(a.endpoint))
                                 : a.result_filename;
    const std::filesystem::path path = std::filesystem::path(a.result_dir.empty() ? "." : a.result_dir) / name;
    if (!a.result_dir.empty()) std::filesystem::create_directories(a.result_dir);
    write_file(path.string(), j.dump(2) + "\n");
    if (a.plot_file.empty()) write_file(std::filesystem::path(path).replace_extension(".svg").string(), svg);
  }
  if (!a.plot_file.empty()) write_file(a.plot_file, svg);
}

bench::BenchRunOptions run_options(const ServeArgs& a) {
  bench::BenchRunOptions o;
  o.settings.base_url = a.base_url;
  o.settings.endpoint = a.endpoint;
  o.settings.request_rate = parse_rate(a.request_rate);
  o.settings.burstiness = a.burstiness;
  o.settings.max_concurrency = a.max_concurrency;
  o.settings.percentiles = parse_percentiles(a.percentiles);
  o.settings.dataset = a.dataset;
  o.api_key = a.api_key;
  o.ignore_eos = a.ignore_eos;
  o.temperature = a.temperature;
  o.seed = a.data.seed;
  o.progress = !a.no_progress;
  return o;
}

void run_serve(ServeArgs& a) {
  while (!a.base_url.empty() && a.base_url.back() == '/') a.base_url.pop_back();
  bench::BenchRunOptions o = run_options(a);
  const bench::ServerModel m = bench::discover_model(a.base_url, a.api_key);
  o.settings.model = a.model.empty() ? m.id : a.model;
  auto requests = make_dataset(a, m.vocab_size);
  o.settings.num_prompts = static_cast<int64_t>(requests.size());
  const bool chat = bench::is_chat_endpoint(a.endpoint);
  if (chat) bench::detokenize_prompts(a.base_url, a.api_key, o.settings.model, requests);
  spdlog::info("bench: {} prompts ({} dataset) to {}{} (model {}), request rate {}, max concurrency {}",
               requests.size(), a.dataset, a.base_url, a.endpoint, o.settings.model, a.request_rate,
               a.max_concurrency > 0 ? std::to_string(a.max_concurrency) : "unlimited");
  // The test request checks the endpoint with the first prompt and one output token: the whole
  // output of an 8K/1K request would cost a minute of the GPU call before measuring starts.
  bench::BenchRequest test = requests.front();
  test.output_len = 1;
  const bench::RequestRecord probe = bench::send_request(a.base_url, o, test);
  DSV4_CHECK(probe.success, "bench: the initial test request failed: {}", probe.error);

  const bench::BenchRun run = bench::run_benchmark(requests, o);
  bench::BenchSummary s = bench::summarize(run.records, run.duration, run.peak_concurrency, o.settings.percentiles);
  // The ideal is counted in token ids, which the server sees as they are only on the completions endpoint.
  if (!chat && requests.front().text.empty()) {
    bench::add_ideal_hit_rate(s, run.records, bench::ideal_cached_tokens(requests, {&test, 1}));
  }
  for (const auto& r : run.records) {
    if (!r.success) spdlog::warn("bench: a request failed: {}", r.error);
  }
  const nlohmann::ordered_json j = bench::report_json(s, o.settings, run.records);
  write_results(a, o.settings, run, j);
  if (a.json) {
    fmt::print("{}\n", j.dump());
  } else {
    fmt::print("{}", bench::format_report(s, o.settings));
  }
  set_exit_code(s.failed > 0 ? 3 : 0);
}

void setup_serve(CLI::App& cmd, ServeArgs& a) {
  cmd.add_option("--base-url", a.base_url, "server to benchmark")->capture_default_str();
  cmd.add_option("--endpoint", a.endpoint, "/v1/completions (a prompt) or /v1/chat/completions (a user message)")
      ->capture_default_str();
  cmd.add_option("--model", a.model, "model name (default: the first of GET /v1/models)");
  cmd.add_option("--dataset-name", a.dataset, "random, prefix_repetition (shared prefixes) or custom (a JSONL file)")
      ->check(CLI::IsMember({"random", "prefix_repetition", "custom"}))
      ->capture_default_str();
  cmd.add_option("--dataset-path", a.dataset_path, "custom: JSONL, one {\"prompt\": text or ids} a line");
  cmd.add_option("--custom-output-len", a.custom_output_len, "custom: max_tokens of lines without output_tokens")
      ->capture_default_str();
  cmd.add_option("--prefix-repetition-prefix-len", a.prefix.prefix_len, "prefix_repetition: L, tokens shared")
      ->capture_default_str();
  cmd.add_option("--prefix-repetition-suffix-len", a.prefix.suffix_len, "prefix_repetition: tokens after it")
      ->capture_default_str();
  cmd.add_option("--prefix-repetition-num-prefixes", a.prefix.num_prefixes, "prefix_repetition: N, distinct prefixes")
      ->capture_default_str();
  cmd.add_option("--prefix-repetition-output-len", a.prefix.output_len, "prefix_repetition: max_tokens")
      ->capture_default_str();
  cmd.add_option("--random-input-len", a.data.input_len, "prompt tokens per request")->capture_default_str();
  cmd.add_option("--random-output-len", a.data.output_len, "max_tokens per request")->capture_default_str();
  cmd.add_option("--random-range-ratio", a.data.range_ratio, "lengths drawn in len x [1 - r, 1 + r]")
      ->capture_default_str();
  cmd.add_option("--num-prompts", a.data.num_prompts, "requests to send")->capture_default_str();
  cmd.add_option("--request-rate", a.request_rate, "requests per second (Poisson arrivals), or inf")
      ->capture_default_str();
  cmd.add_option("--burstiness", a.burstiness, "gamma shape of the arrivals (1 = Poisson)")->capture_default_str();
  cmd.add_option("--max-concurrency", a.max_concurrency, "requests in flight at most (0 = unlimited)")
      ->capture_default_str();
  cmd.add_option("--metric-percentiles", a.percentiles, "percentiles to report")->capture_default_str();
  cmd.add_option("--temperature", a.temperature, "sampling temperature sent")->capture_default_str();
  cmd.add_flag("--ignore-eos", a.ignore_eos, "ask for exactly --random-output-len tokens");
  cmd.add_option("--seed", a.data.seed, "dataset and arrival seed")->capture_default_str();
  cmd.add_option("--api-key", a.api_key, "bearer token for the server");
  cmd.add_option("--result-file", a.result_file, "also write the result JSON here");
  cmd.add_flag("--save-result", a.save_result, "write the result JSON (vLLM's name) and an SVG of it beside it");
  cmd.add_option("--result-dir", a.result_dir, "--save-result: the folder (default: the current one)");
  cmd.add_option("--result-filename", a.result_filename, "--save-result: the file name");
  cmd.add_option("--plot", a.plot_file, "write the SVG (latency CDFs, throughput over time) here");
  cmd.add_flag("--json", a.json, "print the result as one JSON object (vLLM's keys)");
  cmd.add_flag("--disable-tqdm", a.no_progress, "no progress bar");
  cmd.callback([&a] { run_serve(a); });
}

// ---- bench latency -------------------------------------------------------------------------------------

struct LatencyArgs {
  std::string model, prompts = "512", gens = "128";
  std::optional<int64_t> batch;                         // -b: --max-num-batched-tokens under llama-bench's name
  const CLI::Option* max_num_batched_tokens = nullptr;  // to refuse both
  int64_t reps = 3;
  bool json = false;
  EngineFlags flags;
  LoadFlags load;
};

std::vector<int64_t> parse_sizes(const std::string& s, const char* flag) {
  std::vector<int64_t> out = parse_int_list(s, flag);
  for (const int64_t n : out) DSV4_CHECK(n >= 0, "{}: {} is negative", flag, n);
  return out;
}

// Seconds from submission to the first token, and from the first to the last, for one request.
std::pair<double, double> time_request(Engine& engine, int64_t prompt_len, int64_t gen, uint32_t seed) {
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  for (size_t i = 0; i < prompt.size(); ++i)
    prompt[i] = static_cast<int32_t>(1000 + (seed * 7919 + i * 104729) % 90000);
  SamplingParams p;
  p.temperature = 0;
  p.ignore_eos = true;
  p.max_tokens = std::max<int64_t>(1, gen + 1);
  GenerateRequest req{std::move(prompt), p, std::to_string(seed)};  // a salt: no prefix-cache hits across reps
  const auto t0 = Clock::now();
  auto stream = engine.add_request(std::move(req));
  std::optional<Clock::time_point> first;
  for (;;) {
    const RequestOutput out = stream->read(std::chrono::milliseconds(100));
    if (!out.token_ids.empty() && !first) first = Clock::now();
    if (out.finished) {
      DSV4_CHECK(out.finish_reason != FinishReason::kError, "bench latency: the request failed: {}", out.error);
      break;
    }
  }
  const auto t1 = Clock::now();
  return {std::chrono::duration<double>(*first - t0).count(), std::chrono::duration<double>(t1 - *first).count()};
}

struct Row {
  std::string test;
  double mean = 0, sd = 0;
};

Row measure(Engine& engine, const std::string& test, int64_t tokens, int64_t reps, bool prompt_phase, int64_t len) {
  std::vector<double> rates;
  for (int64_t r = 0; r < reps; ++r) {
    const auto [prefill, decode] = prompt_phase ? time_request(engine, len, 0, static_cast<uint32_t>(r))
                                                : time_request(engine, 1, len, static_cast<uint32_t>(r + 1000));
    rates.push_back(static_cast<double>(tokens) / std::max(prompt_phase ? prefill : decode, 1e-9));
  }
  const double mean = std::accumulate(rates.begin(), rates.end(), 0.0) / static_cast<double>(rates.size());
  double var = 0;
  for (const double x : rates) var += (x - mean) * (x - mean);
  return {test, mean, rates.size() > 1 ? std::sqrt(var / static_cast<double>(rates.size() - 1)) : 0};
}

void run_latency(LatencyArgs& a) {
  if (a.batch) {
    DSV4_CHECK(a.max_num_batched_tokens->count() == 0, "bench latency: -b is --max-num-batched-tokens: give one");
    a.flags.config.max_num_batched_tokens = *a.batch;
  }
  if (print_engine_config_if_asked(a.flags)) return;
  EngineConfig config = a.flags.engine_config();
  config.max_num_seqs = 1;  // one request at a time (kLatencyEngineNote)
  const std::filesystem::path dir = a.model.empty() ? ensure_default_model() : std::filesystem::path(a.model);
  const LoadedModel m = load_model(dir, a.load.options());
  spdlog::info("bench latency: {} weights {}", dir.string(), m.options.describe());
  Engine engine(m.config, m.weights, config);
  const std::string model = a.model.empty() ? "dsv4-serve" : dir.filename().string();
  const int threads = config.threads > 0 ? config.threads : static_cast<int>(std::thread::hardware_concurrency());
  const int64_t n_batch = engine.config().max_num_batched_tokens;  // resolved by the engine
  std::vector<Row> rows;
  for (const int64_t p : parse_sizes(a.prompts, "-p")) {
    if (p > 0) rows.push_back(measure(engine, fmt::format("pp{}", p), p, a.reps, true, p));
  }
  for (const int64_t n : parse_sizes(a.gens, "-n")) {
    if (n > 0) rows.push_back(measure(engine, fmt::format("tg{}", n), n, a.reps, false, n));
  }
  if (a.json) {
    nlohmann::ordered_json j = nlohmann::ordered_json::array();
    for (const Row& r : rows) {
      j.push_back({{"model", model},
                   {"backend", config.backend},
                   {"numerics", engine.config().numerics},
                   {"threads", threads},
                   {"n_batch", n_batch},
                   {"test", r.test},
                   {"avg_ts", r.mean},
                   {"stddev_ts", r.sd},
                   {"repetitions", a.reps}});
    }
    fmt::print("{}\n", nlohmann::ordered_json{{"results", j}}.dump());
    return;
  }
  fmt::print("| {:<12} | {:>7} | {:>7} | {:>7} | {:>12} | {:>20} |\n", "model", "backend", "threads", "n_batch", "test",
             "t/s");
  fmt::print("| {:-<12} | {:->6}: | {:->6}: | {:->6}: | {:->11}: | {:->19}: |\n", "", "", "", "", "", "");
  for (const Row& r : rows) {
    fmt::print("| {:<12} | {:>7} | {:>7} | {:>7} | {:>12} | {:>20} |\n", model, config.backend, threads, n_batch,
               r.test, fmt::format("{:.2f} ± {:.2f}", r.mean, r.sd));
  }
}

// What bench latency sets whatever the engine flags say (its help footer).
constexpr const char* kLatencyEngineNote =
    "The engine flags are serve's and generate's, with their defaults; bench latency times one request at a "
    "time, so it runs the engine with --max-num-seqs 1 (the KV cache is sized for one request) whatever that "
    "flag says. -b is --max-num-batched-tokens under llama-bench's name.";

void setup_latency(CLI::App& cmd, LatencyArgs& a) {
  add_model_option(cmd, a.model, false)->description("model folder (default: the embedded model)");
  add_engine_flags(cmd, a.flags);
  add_load_flags(cmd, a.load);
  cmd.add_option("-p,--n-prompt", a.prompts, "prompt lengths to time (comma list; 0 = none)")->capture_default_str();
  cmd.add_option("-n,--n-gen", a.gens, "generation lengths to time (comma list; 0 = none)")->capture_default_str();
  cmd.add_option("-b,--batch-size", a.batch, "prompt tokens per engine step: --max-num-batched-tokens");
  a.max_num_batched_tokens = cmd.get_option("--max-num-batched-tokens");
  cmd.add_option("-r,--repetitions", a.reps, "repetitions of each test")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_flag("--json", a.json, "one JSON object on stdout");
  cmd.footer(kLatencyEngineNote);
  cmd.callback([&a] { run_latency(a); });
}

void setup(CLI::App& cmd) {
  static ServeArgs serve;
  static LatencyArgs latency;
  cmd.require_subcommand(1);
  setup_serve(*cmd.add_subcommand("serve", "benchmark an OpenAI-compatible server (vLLM's bench serve)"), serve);
  setup_latency(*cmd.add_subcommand("latency", "prompt and generation rates of one request (llama-bench style)"),
                latency);
  setup_bench_step(*cmd.add_subcommand("step",
                                       "decode steps (batch x context) and a prefill, timed alone, with bytes "
                                       "and FLOPs for the roofline"));
  setup_bench_comm(*cmd.add_subcommand("comm", "the collectives between ranks, with algorithm and bus bandwidth"));
}

}  // namespace

DSV4_COMMAND("bench",
             "benchmarks: serve (a running server), latency (the engine), step (model forwards), comm (collectives)",
             setup);

}  // namespace dsv4::tools
