// Engine benchmark on the tiny preset (CPU backend), two parts:
//  1. Inter-token latency of running decodes while a long prompt prefills, and the prompt's time to first
//     token: the latency policy with its slack alone (issue M1.4's criterion: the p99 ITL within 2x of
//     the ITL with no prefill), with its default ITL target too (M2.2's: ITL p99 under 200 ms without
//     starving the prompt), and vLLM's budget policy with the budget cut to 1/16 of the prompt.
//  2. Offline throughput: a batch of requests through the engine.
// ITL is measured at the executor: the time between the steps that sampled consecutive tokens of a
// request (what a streaming client sees, minus delivery). Environment: DSV4_BENCH_THREADS (default 1),
// DSV4_BENCH_DECODES (4), DSV4_BENCH_PROMPT (1024), DSV4_BENCH_SLACK (EngineConfig's itl_slack), and
// DSV4_BENCH_SKIP_THROUGHPUT=1.
#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <random>
#include <thread>
#include <unordered_map>

#include "engine/engine.h"
#include "engine/model_runner.h"
#include "model/model_loader.h"
#include "model_tools/presets.h"
#include "model_tools/random_checkpoint.h"

namespace dsv4 {
namespace {

using Clock = std::chrono::steady_clock;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::atoi(v) : fallback;
}

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

std::vector<int32_t> random_ids(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % 1024);
  return t;
}

// Wraps the model runner and records when each request sampled, and how many prefill chunks it ran.
class TimingExecutor final : public Executor {
 public:
  explicit TimingExecutor(std::unique_ptr<Executor> inner) : inner_(std::move(inner)) {}
  void add_request(RequestId id, const SamplingParams& p, std::span<const int32_t> prompt, uint64_t seed) override {
    inner_->add_request(id, p, prompt, seed);
  }
  void remove_request(RequestId id) override { inner_->remove_request(id); }
  std::vector<SampledToken> execute(const Schedule& s) override {
    auto out = inner_->execute(s);
    const double t = now_s();
    std::lock_guard lock(mu_);
    for (const ScheduledChunk& c : s.chunks) {
      if (c.sample) samples_[c.id].push_back(t);
      if (!c.decode) ++chunks_[c.id];
    }
    return out;
  }
  std::unordered_map<RequestId, std::vector<PromptLogprob>> take_prompt_logprobs() override {
    return inner_->take_prompt_logprobs();
  }
  std::vector<double> samples(RequestId id) {
    std::lock_guard lock(mu_);
    return samples_[id];
  }
  int64_t chunks(RequestId id) {
    std::lock_guard lock(mu_);
    return chunks_[id];
  }

 private:
  std::unique_ptr<Executor> inner_;
  std::mutex mu_;
  std::unordered_map<RequestId, std::vector<double>> samples_;
  std::unordered_map<RequestId, int64_t> chunks_;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i =
      static_cast<size_t>(std::min<double>(static_cast<double>(v.size()) - 1, p * static_cast<double>(v.size())));
  return v[i];
}

// Gaps between consecutive samples that both fall in [t0, t1].
void gaps(const std::vector<double>& t, double t0, double t1, std::vector<double>& out) {
  for (size_t i = 1; i < t.size(); ++i) {
    if (t[i - 1] >= t0 && t[i] <= t1) out.push_back(t[i] - t[i - 1]);
  }
}

SamplingParams greedy(int64_t n) {
  SamplingParams p;
  p.temperature = 0;
  p.max_tokens = n;
  p.ignore_eos = true;
  return p;
}

void wait_samples(TimingExecutor& x, RequestId id, size_t n) {
  while (x.samples(id).size() < n) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void itl_run(const LoadedModel& m, EngineConfig c, const std::string& label) {
  const int decodes = env_int("DSV4_BENCH_DECODES", 4);
  const int prompt = env_int("DSV4_BENCH_PROMPT", 1024);
  TimingExecutor* timing = nullptr;
  Engine e(
      m.config, c,
      [&](KvCacheManager& kv, Backend& backend) -> std::unique_ptr<Executor> {
        auto x = std::make_unique<TimingExecutor>(
            std::make_unique<ModelRunner>(m.config, m.weights, kv, c.kv_dtypes, backend, 0));
        timing = x.get();
        return x;
      },
      true);
  std::vector<std::shared_ptr<RequestStream>> running;
  for (int i = 0; i < decodes; ++i) running.push_back(e.add_request({random_ids(32, 100 + i), greedy(3000), {}}));
  for (auto& s : running) wait_samples(*timing, s->id(), 30);  // warm: prefills done, cost model fed
  const RequestId probe = running[0]->id();
  const double b0 = now_s();
  wait_samples(*timing, probe, timing->samples(probe).size() + 200);
  const double b1 = now_s();
  const double p0 = now_s();
  auto long_prompt = e.add_request({random_ids(prompt, 7), greedy(1), {}});
  long_prompt->wait();
  const double p1 = now_s();
  std::vector<double> base, during;
  for (auto& s : running) {
    const auto t = timing->samples(s->id());
    gaps(t, b0, b1, base);
    gaps(t, p0, p1, during);
    e.abort(s->id());
  }
  const double rb = percentile(base, 0.99), rd = percentile(during, 0.99);
  fmt::print("{:<34} {:>6} {:>7} {:>9.2f} {:>9.2f} {:>9.2f} {:>9.2f} {:>7.2f}x {:>8.2f}\n", label,
             timing->chunks(long_prompt->id()), during.size(), percentile(base, 0.5) * 1e3, rb * 1e3,
             percentile(during, 0.5) * 1e3, rd * 1e3, rd / rb, (p1 - p0) * 1e3);
}

void throughput_run(const LoadedModel& m, EngineConfig c, int n, int prompt, int out) {
  Engine e(m.config, m.weights, c);
  const auto t0 = Clock::now();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < n; ++i) streams.push_back(e.add_request({random_ids(prompt, 1000 + i), greedy(out), {}}));
  int64_t generated = 0;
  for (auto& s : streams) generated += s->wait().usage.completion_tokens;
  const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
  const EngineStats st = e.stats();
  fmt::print(
      "{:>4} x {:>5} prompt + {:>4} out: {:7.3f} s; over that time {:8.1f} prompt tok/s, {:7.1f} generated "
      "tok/s; {} steps\n",
      n, prompt, out, dt, n * prompt / dt, static_cast<double>(generated) / dt, st.steps.count);
}

void run() {
  const auto dir = std::filesystem::temp_directory_path() / "dsv4-bench-tiny";
  if (!std::filesystem::exists(dir / "config.json")) write_random_checkpoint(find_preset("tiny").config, 1, dir);
  const LoadedModel m = load_model(dir);
  EngineConfig c;
  c.threads = env_int("DSV4_BENCH_THREADS", 1);
  c.max_num_seqs = 64;
  c.kv_cache_memory = int64_t{256} << 20;
  c.max_model_len = 8192;
  if (const char* slack = std::getenv("DSV4_BENCH_SLACK")) c.itl_slack = std::atof(slack);
  const int prompt = env_int("DSV4_BENCH_PROMPT", 1024);
  fmt::print("tiny preset, CPU threads {}, {} decodes running, a {}-token prompt arrives, itl_slack {}\n", c.threads,
             env_int("DSV4_BENCH_DECODES", 4), prompt, c.itl_slack);
  fmt::print("{:<34} {:>6} {:>7} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8}\n", "policy", "chunks", "gaps", "base p50",
             "base p99", "pref p50", "pref p99", "p99 x", "TTFT ms");
  EngineConfig slack_only = c;
  slack_only.itl_target_ms = 0;
  itl_run(m, slack_only, "latency, slack alone, budget 2048");
  itl_run(m, c, fmt::format("latency (default), {:g} ms target", c.itl_target_ms));
  EngineConfig b = c;
  b.chunked_prefill_policy = ChunkPolicy::kBudget;
  b.max_num_batched_tokens = prompt / 16;
  itl_run(m, b, fmt::format("budget, budget {}", b.max_num_batched_tokens));
  fmt::print("(ITL in ms; base = no prefill running, pref = while the prompt prefills)\n");
  if (env_int("DSV4_BENCH_SKIP_THROUGHPUT", 0) != 0) return;
  fmt::print("\nthroughput\n");
  throughput_run(m, c, 32, 128, 64);
  throughput_run(m, c, 8, 512, 32);
}

}  // namespace
}  // namespace dsv4

int main() {
  try {
    dsv4::run();
  } catch (const std::exception& e) {
    fmt::print(stderr, "engine_bench: {}\n", e.what());
    return 1;
  }
  return 0;
}
