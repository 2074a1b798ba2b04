// The scheduler under a GPU's measured step costs, in virtual time: serving bursts (every prompt sent at
// once, EOS ignored, as `dsv4 bench serve` runs them on the GPU) through the real Scheduler, its
// PrefillPacer and a bookkeeping KvCacheManager, each step costing what the cost model says. It puts the
// chunk policies side by side on the GPU's costs without a GPU (M2.2 item 4), and bounds what any policy
// can reach from the step costs alone: where the measured serving rows fall short of it, the steps cost
// more in serving than in `bench step`.
//
// The cost model (H100, session 50, `bench step` on the flash-attn preset; docs/perf.md): a decode step
// of b sequences at 8K context (graphs) by linear interpolation in kDecodeMs; a prompt chunk of n tokens
// adds kChunkFixedMs + n x kTokenUs (fitted to the mixed steps b16 + 512 / + 2048: 59.99 / 142.34 ms);
// every step pays kHostMs of host work and +-5% noise. Environment: DSV4_SIM_TOKEN_US (the cost a
// prompt token, to ask what a faster or slower prefill would give).
#include <fmt/core.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kv/kv_layout.h"
#include "kv/kv_memory.h"
#include "kv/kv_pool_sizing.h"
#include "model_tools/presets.h"
#include "sched/scheduler.h"

namespace dsv4 {
namespace {

constexpr double kDecodeMs[][2] = {{1, 10.1}, {16, 19.1}, {32, 22.8}, {64, 29.0}};
constexpr double kChunkFixedMs = 13.5;
constexpr double kTokenUs = 53.6;
constexpr double kHostMs = 1.0;
constexpr int64_t kMaxSeqs = 64;   // serve-gpu.sh's --max-num-seqs
constexpr int64_t kBudget = 8192;  // the engine's step budget on a GPU

double decode_ms(int64_t b) {
  const auto x = static_cast<double>(b);
  for (size_t i = 1; i < std::size(kDecodeMs); ++i) {
    const auto& lo = kDecodeMs[i - 1];
    const auto& hi = kDecodeMs[i];
    if (x <= hi[0] || i + 1 == std::size(kDecodeMs))
      return lo[1] + (hi[1] - lo[1]) * (std::max(x, lo[0]) - lo[0]) / (hi[0] - lo[0]);
  }
  return kDecodeMs[0][1];
}

struct Burst {
  int64_t concurrency = 16, input = 8192, output = 1024;
};

struct Outcome {
  double tok_s = 0, ttft_mean = 0, ttft_p99 = 0, itl_p50 = 0, itl_p99 = 0, seconds = 0;
  int64_t prompt_steps = 0;       // steps that carried prompt tokens
  double prompt_step_tokens = 0;  // their mean prompt tokens
  double prompt_step_ms = 0;      // and their mean time
};

double at(std::vector<double>& v, double q) {
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

Outcome run(const Burst& burst, SchedulerConfig sc, double token_us) {
  const ModelConfig& cfg = find_preset("flash-attn").config;
  const KvLayout layout = make_kv_layout(cfg, {});
  const KvPoolSizing sizing{kMaxSeqs, sc.max_num_batched_tokens, 1.0};
  KvCacheManager kv(layout, size_kv_pools(layout, int64_t{64} << 30, sizing).pages, KvCacheOptions{});
  Scheduler s(sc, kv);
  std::mt19937 rng(1);
  std::uniform_real_distribution<double> noise(0.95, 1.05);
  std::map<RequestId, std::vector<double>> times;
  std::map<RequestId, int64_t> left;
  for (RequestId id = 1; id <= static_cast<RequestId>(burst.concurrency); ++id) {
    std::vector<int32_t> prompt(static_cast<size_t>(burst.input));
    for (auto& t : prompt) t = static_cast<int32_t>(rng() % 129280);
    s.add(id, std::move(prompt));
    left[id] = burst.output;
  }
  Outcome o;
  double now = 0, prompt_ms = 0, prompt_tokens = 0;
  std::vector<double> itl;
  while (s.has_work()) {
    const Schedule sch = s.schedule();
    const int64_t b = sch.num_decode_tokens, n = sch.num_prefill_tokens;
    double ms = (b > 0 ? decode_ms(b) : 0) + (n > 0 ? kChunkFixedMs + token_us * 1e-3 * static_cast<double>(n) : 0);
    ms = ms * noise(rng) + kHostMs;
    now += ms / 1e3;
    s.observe_step(sch, ms / 1e3);
    if (n > 0) {
      ++o.prompt_steps;
      prompt_ms += ms;
      prompt_tokens += static_cast<double>(n);
    }
    for (const ScheduledChunk& c : sch.chunks) {
      if (!c.sample) continue;
      std::vector<double>& t = times[c.id];
      if (!t.empty()) itl.push_back((now - t.back()) * 1e3);
      t.push_back(now);
      s.append_token(c.id, 1);
      if (--left[c.id] == 0) s.finish(c.id);
    }
  }
  std::vector<double> ttft;
  for (const auto& [id, t] : times) ttft.push_back(t.front());
  for (double t : ttft) o.ttft_mean += t / static_cast<double>(ttft.size());
  o.ttft_p99 = at(ttft, 0.99);
  o.itl_p50 = at(itl, 0.5);
  o.itl_p99 = at(itl, 0.99);
  o.seconds = now;
  o.tok_s = static_cast<double>(burst.concurrency * burst.output) / now;
  o.prompt_step_tokens = o.prompt_steps > 0 ? prompt_tokens / static_cast<double>(o.prompt_steps) : 0;
  o.prompt_step_ms = o.prompt_steps > 0 ? prompt_ms / static_cast<double>(o.prompt_steps) : 0;
  return o;
}

void row(const Burst& burst, const std::string& policy, SchedulerConfig sc, double token_us) {
  const Outcome o = run(burst, sc, token_us);
  fmt::print(
      "c{:<3} {:>5} in / {:>4} out  {:<22} {:7.1f} output tok/s  TTFT mean {:5.2f} s / p99 {:5.2f}  ITL p50 {:5.1f} / "
      "p99 {:5.1f} ms  {:4} prompt steps of {:5.0f} tokens, {:6.1f} ms\n",
      burst.concurrency, burst.input, burst.output, policy, o.tok_s, o.ttft_mean, o.ttft_p99, o.itl_p50, o.itl_p99,
      o.prompt_steps, o.prompt_step_tokens, o.prompt_step_ms);
}

void run_all() {
  const char* env = std::getenv("DSV4_SIM_TOKEN_US");
  const double token_us = env != nullptr ? std::atof(env) : kTokenUs;
  fmt::print("modeled GPU: decode b1 / b16 / b32 / b64 {} / {} / {} / {} ms, a prompt chunk {} ms + {} us a token\n",
             kDecodeMs[0][1], kDecodeMs[1][1], kDecodeMs[2][1], kDecodeMs[3][1], kChunkFixedMs, token_us);
  for (const int64_t c : {1, 16, 64}) {
    const Burst burst{c, 8192, 1024};
    const SchedulerConfig base{.max_num_seqs = kMaxSeqs, .max_num_batched_tokens = kBudget};
    row(burst, "latency (150 ms)", base, token_us);
    SchedulerConfig slack_only = base;
    slack_only.itl_target_ms = 0;
    row(burst, "latency (slack alone)", slack_only, token_us);
    for (const int64_t budget : {2048, 8192}) {
      SchedulerConfig b = base;
      b.policy = ChunkPolicy::kBudget;
      b.max_num_batched_tokens = budget;
      row(burst, fmt::format("budget {}", budget), b, token_us);
    }
  }
}

}  // namespace
}  // namespace dsv4

int main() {
  dsv4::run_all();
  return 0;
}
