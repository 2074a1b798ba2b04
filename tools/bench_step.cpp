// dsv4 bench step: one model forward timed in isolation on any backend — decode steps at batch B and
// context C, and a prefill of P tokens — with the bytes a decode step must read (weights touched and
// KV entries attended) and the FLOPs a prefill must do, so each row can be judged against the
// hardware's roofline. The KV cache a decode step reads is filled with random valid entries
// (model_tools/random_kv.h): the indexer's top-k and attention then see distinct scores and real
// scales, as in serving, rather than zeros.
#include "tools/bench_step.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>

#include "backend/backend.h"
#include "backend/kernel_timeline.h"
#include "backend/op_profile.h"
#include "core/error.h"
#include "core/kv_entry.h"
#include "engine/cache_sizing.h"
#include "model/model.h"
#include "model/model_loader.h"
#include "model/paged_kv.h"
#include "model/step_graphs.h"
#include "model_tools/random_kv.h"
#include "tools/command.h"
#include "tools/command_ranks.h"
#include "tools/engine_flags.h"
#include "tools/load_flags.h"
#include "tools/parallel_flags.h"

namespace dsv4::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct StepArgs {
  std::string model, backend, batches = "1,8,32", contexts = "8192,131072", numerics;
  std::string mixed;     // prompt chunk sizes of mixed steps (comma list; empty: none)
  int64_t mixed_at = 0;  // the position of a mixed step's chunk (its prompt's tokens before it are cached)
  int64_t prefill = 8192;
  int64_t prefill_chunk = 0;  // 0: the prompt as one step
  int reps = 5;
  int threads = 0;
  bool json = false;
  bool profile = false;
  bool timeline = false;
  bool enforce_eager = false;
  bool compare_eager = false;
  LoadFlags load;
  ParallelConfig parallel;
  NodeConfig nodes;
};

// Bytes of the checkpoint's main stack, split into routed experts (per expert of one layer) and the rest.
struct WeightBytes {
  uint64_t dense = 0;       // everything but routed experts and the embedding table
  uint64_t embed_row = 0;   // one row of the embedding table
  uint64_t per_expert = 0;  // w1 + w2 + w3 of one routed expert
};

WeightBytes weight_bytes(const LoadedModel& m) {
  WeightBytes w;
  for (const TensorSpec& t : m.tensors()) {
    const std::string& name = t.name;
    if (name.rfind("mtp.", 0) == 0) continue;
    const uint64_t bytes = t.nbytes();
    if (name == "embed.weight") {
      w.embed_row = bytes / static_cast<uint64_t>(m.config.vocab_size);
    } else if (name.find(".ffn.experts.") != std::string::npos) {
      if (name.rfind("layers.0.ffn.experts.0.", 0) == 0) w.per_expert += bytes;
    } else {
      w.dense += bytes;
    }
  }
  return w;
}

// Bytes one decode step must read: every dense weight once, the experts B tokens can touch, B
// embedding rows, and per sequence the KV entries attention and the indexer read.
uint64_t decode_bytes(const ModelConfig& c, const WeightBytes& w, int64_t batch, int64_t context) {
  const KvEntryDims attn{c.head_dim, c.rope_head_dim}, index{c.index_head_dim, 0};
  const auto entry = static_cast<uint64_t>(kv_entry_bytes(KvEntryFormat::kAttnFp8, attn));
  const auto key = static_cast<uint64_t>(kv_entry_bytes(KvEntryFormat::kIndexFp4, index));
  const auto experts = static_cast<uint64_t>(std::min<int64_t>(c.n_routed_experts, batch * c.n_activated_experts));
  uint64_t bytes = w.dense + static_cast<uint64_t>(batch) * w.embed_row;
  for (int l = 0; l < c.n_layers; ++l) {
    bytes += experts * w.per_expert;
    uint64_t kv = static_cast<uint64_t>(std::min<int64_t>(context, c.window_size)) * entry;
    if (c.compress_ratio(l) == 4) {
      kv += static_cast<uint64_t>(std::min<int64_t>(c.index_topk, context / 4)) * entry;
      kv += static_cast<uint64_t>(context / 4) * key;
    } else if (c.compress_ratio(l) == 128) {
      kv += static_cast<uint64_t>(context / 128) * entry;
    }
    bytes += static_cast<uint64_t>(batch) * kv;
  }
  return bytes;
}

// FLOPs of a prefill of P tokens: 2 per weight element per token on the active path (top-k + shared
// experts), plus attention's QK and PV over each query's entries.
double prefill_flops(const ModelConfig& c, const LoadedModel& m, int64_t p) {
  double params = 0;
  for (const TensorSpec& spec : m.tensors()) {
    const std::string& name = spec.name;
    if (name.rfind("mtp.", 0) == 0 || name == "embed.weight") continue;
    const TensorSpec* t = &spec;
    if (t->shape.size() != 2 || name.find(".scale") != std::string::npos || name.find("tid2eid") != std::string::npos ||
        name.find("hc_") != std::string::npos)
      continue;
    double n = static_cast<double>(t->shape[0]) * static_cast<double>(t->shape[1]);
    if (t->dtype == DType::kI8) n *= 2;  // packed FP4
    if (name.find(".ffn.experts.") != std::string::npos)
      n *= static_cast<double>(c.n_activated_experts) / c.n_routed_experts;
    params += n;
  }
  double attn = 0;
  for (int l = 0; l < c.n_layers; ++l) {
    const int ratio = c.compress_ratio(l);
    const double window = static_cast<double>(std::min<int64_t>(p, c.window_size));
    const double compressed = ratio == 4 ? std::min<double>(c.index_topk, p / 8.0) : ratio ? p / 256.0 : 0.0;
    attn += 4.0 * c.n_heads * c.head_dim * (window + compressed);
    if (ratio == 4) attn += 2.0 * c.index_n_heads * c.index_head_dim * (p / 8.0);  // indexer scores, mean p/8 keys
  }
  return static_cast<double>(p) * (2.0 * params + attn);
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Row {
  std::string test;
  int64_t batch = 0, context = 0;
  double ms = 0, tokens_per_s = 0, bytes = 0, flops = 0;
  double enqueue_ms = 0;  // until the host had issued the whole step (prefill: its steps; the rest is waiting)
  // decode through graphs: of which building the step's index (page maps synced, one upload) and
  // launching its recording (StepGraphStats); the rest is padding, shape lookup and the step's logits.
  double index_ms = 0, launch_ms = 0;
  double sync_ms = 0, upload_ms = 0;  // of index_ms: the page maps' sync, the upload
  int64_t upload_bytes = 0;           // of that upload (the last step's)
  // --compare-eager: the last step again, eagerly: normalised logit error and argmax agreement.
  double eager_error = -1, eager_argmax = -1;
  std::string mode = "eager";  // decode: graphs, padded or eager (prefill and mixed always eager)
  int64_t chunk = 0;           // mixed: the prompt chunk's tokens beside the decodes
  int64_t chunk_at = 0;        // mixed: the chunk's first position in its prompt
  // Eager steps (prefill, mixed): the most the device's allocator held during a timed step beyond what it
  // held before it (the step's activations and scratch); -1 where the device does not count. pool_slack_bytes:
  // what the allocator kept beyond that peak (freed blocks it holds: the reserve must cover them too).
  int64_t activation_bytes = -1, pool_slack_bytes = -1;
};

// Brackets eager steps to find their activations' peak (Device::memory_use); decode steps replay graphs,
// whose memory comes from their own pools, and are not measured.
class ActivationPeak {
 public:
  explicit ActivationPeak(Device& dev) : dev_(dev) {}
  void before() {
    dev_.synchronize();
    dev_.reset_memory_peak();
    base_ = dev_.memory_use().current;
  }
  void after() {
    dev_.synchronize();
    const Device::MemoryUse u = dev_.memory_use();
    if (base_ >= 0 && u.peak >= 0) most_ = std::max(most_, u.peak - base_);
    if (u.reserved >= 0) slack_ = std::max(slack_, u.reserved - u.peak);
  }
  int64_t most() const { return most_; }
  int64_t slack() const { return slack_; }

 private:
  Device& dev_;
  int64_t base_ = -1, most_ = -1, slack_ = -1;
};

// The last decode step once more in the model's mode and once eagerly (the repeated step rewrites
// the same KV entries, so both see the same cache): how far a recorded or padded step is from eager.
void compare_with_eager(Model& model, const ForwardBatch& b, KvAccess& kv, Row& r) {
  const std::vector<float> got = model.forward(b, kv);
  const StepMode mode = model.step_mode();
  model.set_step_mode(StepMode::kEager);
  const std::vector<float> want = model.forward(b, kv);
  model.set_step_mode(mode);
  const auto V = static_cast<size_t>(model.config().vocab_size);
  double d = 0, ref = 0;
  int64_t agree = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    d += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    ref += double{want[i]} * want[i];
  }
  for (size_t row = 0; row * V < want.size(); ++row) {
    const auto g = got.begin() + static_cast<std::ptrdiff_t>(row * V),
               w = want.begin() + static_cast<std::ptrdiff_t>(row * V);
    agree += std::max_element(g, g + static_cast<std::ptrdiff_t>(V)) - g ==
             std::max_element(w, w + static_cast<std::ptrdiff_t>(V)) - w;
  }
  r.eager_error = ref > 0 ? std::sqrt(d / ref) : 0;
  r.eager_argmax = static_cast<double>(agree) / static_cast<double>(std::max<size_t>(1, want.size() / V));
}

// The context is allocated the way chunked prefill would (kDecodeChunk positions at a time), so the pools
// need room for one chunk in flight, not the whole context's sliding state.
constexpr int64_t kDecodeChunk = 8192;
constexpr int kDecodeSlack = 4;  // positions past context + reps: the warm-up steps and the last allocation

// Whether a row's KV pools (batch sequences of `positions`, allocated `chunk` positions at a time) fit the
// device's free memory with room to spare for the step's activations and scratch (a tenth of what is
// free, at least 1 GiB); else why not.
std::optional<std::string> misfit(const ModelConfig& c, const Device& dev, int64_t batch, int64_t positions,
                                  int64_t chunk) {
  double kv = 0;
  try {
    kv = static_cast<double>(OwnedPagedCache::bytes_for(c, static_cast<int>(batch), positions, chunk));
  } catch (const Error& e) {
    return e.what();
  }
  const double free = static_cast<double>(dev.memory_free());
  if (kv <= 0.9 * free - static_cast<double>(int64_t{1} << 30)) return std::nullopt;
  return fmt::format("its KV pools take {:.1f} GiB with {:.1f} GiB free", kv / (1 << 30), free / (1 << 30));
}

// --timeline: the kernels of each timed step (Device::start_trace), one list a step.
using StepTraces = std::vector<std::vector<Device::KernelSpan>>;

void start_trace(Device& dev, StepTraces* traces) {
  if (traces) DSV4_CHECK(dev.start_trace(), "bench step --timeline: {}", dev.trace_unavailable());
}
void stop_trace(Device& dev, StepTraces* traces) {
  if (traces) traces->push_back(dev.stop_trace());
}

// ", activations peak 1.23 GiB (the engine reserves 8.00 GiB for a step of 8192 tokens)" where measured.
std::string activations_note(const Row& r, const ModelConfig& c, int64_t step_tokens) {
  if (r.activation_bytes < 0) return "";
  constexpr double kGiB = 1 << 30;
  return fmt::format(
      ", activations peak {:.2f} GiB (the engine reserves {:.2f} GiB for a step of {} tokens; the allocator keeps "
      "{:.2f} GiB more than its peak)",
      static_cast<double>(r.activation_bytes) / kGiB,
      static_cast<double>(step_activation_reserve(c, step_tokens)) / kGiB, step_tokens,
      static_cast<double>(r.pool_slack_bytes) / kGiB);
}

// One decode step of `batch` sequences at position `context` (their caches allocated to it); with `chunk`
// > 0 a mixed step: the same decodes and `chunk` tokens of one more prompt from position `chunk_at` (the
// prompt's tokens before it in the cache, as a later chunk of a long prompt finds them), as serving runs a
// prompt's chunk beside the running decodes (chunked prefill). Mixed steps run eagerly (only decode-only
// steps are recorded); their chunk is written again at the same positions each step.
Row time_decode(Model& model, Device& dev, const ModelConfig& c, const WeightBytes& w, int64_t batch, int64_t context,
                int64_t chunk, int64_t chunk_at, int reps, bool compare, StepTraces* traces) {
  const int64_t len = std::max(context + reps + kDecodeSlack, chunk_at + chunk);
  const auto prompt = static_cast<int32_t>(batch);  // the mixed step's prompt, after the decodes
  OwnedPagedCache cache(c, static_cast<int>(batch + (chunk > 0)), len, kDecodeChunk, KvDTypes{}, &dev);
  // Each sequence its own tokens, as in serving: with one shared row every sequence decoded the same
  // token, whose routing likely shared experts (b16 on the H100: 17.5 ms against the 21.9 ms of device
  // time serving's decode steps took).
  std::mt19937 rng(11);
  std::vector<int32_t> all_ids(static_cast<size_t>((batch + 1) * len));
  for (auto& x : all_ids) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab_size));
  auto row = [&](int32_t s) { return all_ids.data() + s * len; };
  auto ids = [&](int32_t s, int64_t n) { return std::span<const int32_t>(row(s), static_cast<size_t>(n)); };
  const auto allocate_to = [&](int32_t s, int64_t end) {
    for (int64_t at = 0; at < end; at += kDecodeChunk) {
      const int64_t n = std::min(kDecodeChunk, end - at);
      cache.allocate(s, n, ids(s, at + n));
    }
  };
  for (int32_t s = 0; s < batch; ++s) {
    cache.add(s, context);
    allocate_to(s, context);
    // The first decode position too: that releases the last chunk's sliding pages.
    cache.allocate(s, 1, ids(s, context + 1));
  }
  if (chunk > 0) {
    cache.add(prompt, chunk_at + chunk);
    allocate_to(prompt, chunk_at);
    cache.allocate(prompt, chunk, ids(prompt, chunk_at + chunk));
  }
  fill_random_kv(c, cache.access(), dev, 12);
  std::vector<double> ms, enqueue, index, launch, sync, upload;
  const int warm = reps > 0 ? 2 : 1;  // warm-up steps (reps 0: one untimed step, for --profile)
  ForwardBatch b;
  ActivationPeak peak(dev);
  for (int i = 0; i < reps + warm; ++i) {
    const int64_t pos = context + i;
    b = ForwardBatch();
    for (int32_t s = 0; s < batch; ++s) {
      if (i > 0) cache.allocate(s, 1, ids(s, pos + 1));
      b.add(s, pos, row(s) + pos, 1);
    }
    if (chunk > 0) b.add(prompt, chunk_at, row(prompt) + chunk_at, chunk);
    // The step to its logits, then a wait: the step's return says how long the host took to issue it.
    const bool peaked = chunk > 0 && i == warm;  // the first timed step (its own sync: not timed)
    if (peaked) peak.before();
    if (i >= warm) start_trace(dev, traces);
    const auto t0 = Clock::now();
    const StepLogits l = model.step(b, cache.access());
    const auto t1 = Clock::now();
    dev.synchronize();
    if (i < warm) continue;
    stop_trace(dev, traces);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    enqueue.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    const StepGraphStats g = model.graph_stats();
    index.push_back(g.index_ms);
    launch.push_back(g.launch_ms);
    sync.push_back(g.sync_ms);
    upload.push_back(g.upload_ms);
    if (peaked) peak.after();
  }
  Row r{chunk > 0 ? "mixed" : "decode", batch, context};
  r.chunk = chunk;
  r.chunk_at = chunk_at;
  r.mode = chunk > 0 ? "eager" : step_mode_name(model.step_mode());
  if (compare) compare_with_eager(model, b, cache.access(), r);
  r.ms = median(ms);
  r.enqueue_ms = median(enqueue);
  if (chunk == 0) {  // graph statistics: a mixed step is never recorded
    r.index_ms = median(index);
    r.launch_ms = median(launch);
    r.sync_ms = median(sync);
    r.upload_ms = median(upload);
    r.upload_bytes = model.graph_stats().upload_bytes;
  }
  r.activation_bytes = peak.most();
  r.pool_slack_bytes = peak.slack();
  r.tokens_per_s = static_cast<double>(batch + chunk) * 1e3 / r.ms;
  r.bytes = static_cast<double>(decode_bytes(c, w, batch, context));
  return r;
}

// Tokens a prefill step of a p-token prompt takes: `chunk` (0: the whole prompt), at most p.
int64_t prefill_step(int64_t p, int64_t chunk) { return chunk > 0 ? std::min(chunk, p) : p; }

// A prompt of p tokens, as one step or in steps of `chunk` tokens (each attending to the ones before, as
// chunked prefill does: what a prompt too long for one step's activations needs).
Row time_prefill(Model& model, Device& dev, const LoadedModel& m, int64_t p, int64_t chunk, int reps,
                 StepTraces* traces) {
  const ModelConfig& c = m.config;
  std::mt19937 rng(12);
  std::vector<int32_t> ids(static_cast<size_t>(p));
  for (auto& x : ids) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(c.vocab_size));
  const int64_t step = prefill_step(p, chunk);
  std::vector<double> ms, enqueue;
  ActivationPeak peak(dev);
  for (int i = 0; i < reps + 1; ++i) {
    OwnedPagedCache cache(c, 1, p, step, KvDTypes{}, &dev);
    cache.add(0, p);
    if (i == 1) peak.before();  // the first timed prompt (the reset's sync comes before the clock)
    dev.synchronize();
    if (i >= 1) start_trace(dev, traces);
    const auto t0 = Clock::now();
    double issued = 0;  // the host's time to issue the steps, each step waited for before the next
    for (int64_t at = 0; at < p; at += step) {
      const int64_t n = std::min(step, p - at);
      cache.allocate(0, n, std::span<const int32_t>(ids.data(), static_cast<size_t>(at + n)));
      ForwardBatch b;
      b.add(0, at, ids.data() + at, n);
      const auto s0 = Clock::now();
      const StepLogits l = model.step(b, cache.access());
      issued += std::chrono::duration<double, std::milli>(Clock::now() - s0).count();
      dev.synchronize();
    }
    if (i < 1) continue;
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    enqueue.push_back(issued);
    stop_trace(dev, traces);
    if (i == 1) peak.after();
  }
  Row r{"prefill", 1, p};
  r.mode = "eager";
  r.ms = median(ms);
  r.enqueue_ms = median(enqueue);
  r.activation_bytes = peak.most();
  r.pool_slack_bytes = peak.slack();
  r.tokens_per_s = static_cast<double>(p) * 1e3 / r.ms;
  r.flops = prefill_flops(c, m, p);
  return r;
}

// "decode batch 8 context 8192", with a mixed step's " chunk 2048" (and " at 6144" past a prompt's start).
std::string label(const Row& r) {
  std::string s = fmt::format("{} batch {} context {}", r.test, r.batch, r.context);
  if (r.chunk > 0) s += fmt::format(" chunk {}", r.chunk);
  if (r.chunk_at > 0) s += fmt::format(" at {}", r.chunk_at);
  return s;
}

// Where one more step of the row went, op by op: device time between marks around each op.
// Beside each op's device time, the host's time in its calls (issuing them, and any wait for the device
// inside: a sync for the MoE's row counts shows there).
void print_profile(const Row& r, OpProfile& prof) {
  const std::vector<OpTime> totals = prof.totals();
  double all = 0, host = 0;
  for (const OpTime& t : totals) all += t.ms, host += t.host_ms;
  fmt::print("profile {}: {:.3f} ms of device time in ops, {:.3f} ms of host time in their calls\n", label(r), all,
             host);
  for (const OpTime& t : totals)
    fmt::print("  {:26} {:6} calls {:10.3f} ms {:5.1f}%  host {:9.3f} ms\n", t.op, t.calls, t.ms, 100 * t.ms / all,
               t.host_ms);
}

// Where the traced steps of the row went on the device: span, busy and idle time, the kernels by time.
constexpr int kTimelineSteps = 3;
constexpr size_t kTimelineRows = 40;

void print_timeline(const Row& r, const KernelTimeline& t, bool json) {
  if (json) {
    nlohmann::json kernels = nlohmann::json::array();
    for (const KernelTotal& k : t.by_time)
      kernels.push_back({{"name", k.name},
                         {"stream", k.stream},
                         {"calls", k.calls},
                         {"share_us", k.share_us},
                         {"us", k.us},
                         {"idle_before_us", k.idle_before_us}});
    fmt::print("{}\n", nlohmann::json{{"test", "timeline"},
                                      {"of", r.test},
                                      {"batch", r.batch},
                                      {"context", r.context},
                                      {"chunk", r.chunk},
                                      {"chunk_at", r.chunk_at},
                                      {"mode", r.mode},
                                      {"steps", t.steps},
                                      {"kernels", t.kernels},
                                      {"span_us", t.span_us},
                                      {"busy_us", t.busy_us},
                                      {"sum_us", t.sum_us},
                                      {"stream_busy_us", t.stream_busy_us},
                                      {"by_time", kernels}}
                           .dump());
    return;
  }
  fmt::print(
      "timeline {} ({}, {} steps): span {:.1f} us, busy {:.1f} us ({:.1f}%), idle {:.1f} us, "
      "{:.0f} kernels a step ({:.1f} us of kernel time: queues overlap where above busy)\n",
      label(r), r.mode, t.steps, t.span_us, t.busy_us, t.span_us > 0 ? 100 * t.busy_us / t.span_us : 0, t.idle_us(),
      t.kernels, t.sum_us);
  for (const auto& [stream, us] : t.stream_busy_us) fmt::print("  queue {}: busy {:.1f} us\n", stream, us);
  // share: how much later the step stood done because of the kernel (end minus the latest end before it);
  // own: its spans start to end (with PDL, its wait on the kernel before included).
  fmt::print("  {:52} {:>6} {:>7} {:>10} {:>6} {:>10} {:>10} {:>12}\n", "kernel", "queue", "calls", "share us", "%",
             "share/call", "own/call", "idle before");
  for (size_t i = 0; i < std::min(kTimelineRows, t.by_time.size()); ++i) {
    const KernelTotal& k = t.by_time[i];
    const double calls = std::max(k.calls, 1e-9);
    fmt::print("  {:52.52} {:6} {:7.1f} {:10.1f} {:6.1f} {:10.2f} {:10.2f} {:12.1f}\n", k.name, k.stream, k.calls,
               k.share_us, t.span_us > 0 ? 100 * k.share_us / t.span_us : 0, k.share_us / calls, k.us / calls,
               k.idle_before_us);
  }
}

// Every row asked for, on one model: one rank, or a rank of a sharded run (all ranks run the same steps
// together; rank 0 logs).
std::vector<Row> bench_rows(const StepArgs& a, const LoadedModel& m, Backend& backend, const ModelShard& shard) {
  const bool logs = shard.rank == 0;
  if (a.timeline) {  // the tracer attached before any graph is made (and its absence said at once)
    StepTraces none;
    start_trace(*backend.device, &none);
    stop_trace(*backend.device, &none);
  }
  OpProfile prof(*backend.ops, *backend.device);  // off unless --profile: forwards without waiting
  Model model(m.config, m.weights, prof, *backend.device, shard);
  const WeightBytes w = weight_bytes(m);
  std::vector<Row> rows;
  if (a.enforce_eager) model.set_step_mode(StepMode::kEager);
  const StepMode mode = model.step_mode();
  const bool overlap = model.overlap();
  // A row, then (--timeline) its steps again with the kernel trace on, then (--profile) one profiled step.
  auto measured = [&](auto&& time_row) {
    rows.push_back(time_row(a.reps, nullptr));
    if (a.timeline) {
      StepTraces traces;
      const Row again = time_row(kTimelineSteps, &traces);
      if (logs) print_timeline(again, summarize_timeline(traces), a.json);
    }
    if (!a.profile) return;
    // Marks around every op: nothing can be recorded, and the side queue would blur each op's time.
    model.set_step_mode(StepMode::kEager);
    model.set_overlap(false);
    prof.enable(true);
    time_row(0, nullptr);
    prof.enable(false);
    model.set_step_mode(mode);
    model.set_overlap(overlap);
    if (logs) print_profile(rows.back(), prof);
  };
  const std::vector<int64_t> mixed = a.mixed.empty() ? std::vector<int64_t>{} : parse_int_list(a.mixed, "--mixed");
  for (const int64_t chunk : mixed) DSV4_CHECK(chunk > 0, "bench step: --mixed chunks must be positive");
  for (const int64_t ctx : parse_int_list(a.contexts, "--context"))
    for (const int64_t b : parse_int_list(a.batches, "--batch")) {
      DSV4_CHECK(b > 0 && ctx > 0, "bench step: batch and context must be positive");
      if (const auto why = misfit(m.config, *backend.device, b, ctx + a.reps + kDecodeSlack, kDecodeChunk)) {
        if (logs) spdlog::warn("decode batch {} context {}: skipped: {}", b, ctx, *why);
        continue;
      }
      measured([&](int reps, StepTraces* traces) {
        return time_decode(model, *backend.device, m.config, w, b, ctx, 0, 0, reps,
                           a.compare_eager && reps > 0 && !traces, traces);
      });
      if (logs) {
        spdlog::info(
            "decode batch {} context {}: {:.3f} ms (the host issued the stack in {:.3f} ms: index {:.3f} (page maps "
            "{:.3f}, upload {:.3f} of {} KiB), graph launch {:.3f})",
            b, ctx, rows.back().ms, rows.back().enqueue_ms, rows.back().index_ms, rows.back().sync_ms,
            rows.back().upload_ms, rows.back().upload_bytes / 1024, rows.back().launch_ms);
        if (rows.back().eager_error >= 0)
          spdlog::info("decode batch {} context {}: against eager: logits error {:.2e}, argmax agreement {:.3f}", b,
                       ctx, rows.back().eager_error, rows.back().eager_argmax);
      }
      for (const int64_t chunk : mixed) {
        if (const auto why = misfit(m.config, *backend.device, b + 1,
                                    std::max(ctx + a.reps + kDecodeSlack, a.mixed_at + chunk), kDecodeChunk)) {
          if (logs) spdlog::warn("mixed batch {} context {} chunk {}: skipped: {}", b, ctx, chunk, *why);
          continue;
        }
        measured([&](int reps, StepTraces* traces) {
          Row r = time_decode(model, *backend.device, m.config, w, b, ctx, chunk, a.mixed_at, reps, false, traces);
          r.flops = prefill_flops(m.config, m, chunk);
          return r;
        });
        if (logs)
          spdlog::info(
              "mixed batch {} context {} + a {}-token chunk at {}: {:.3f} ms (the host issued it in {:.3f} ms){}", b,
              ctx, chunk, a.mixed_at, rows.back().ms, rows.back().enqueue_ms,
              activations_note(rows.back(), m.config, b + chunk));
      }
    }
  const auto prefill_why =
      a.prefill > 0 ? misfit(m.config, *backend.device, 1, a.prefill, prefill_step(a.prefill, a.prefill_chunk))
                    : std::nullopt;
  if (prefill_why && logs) spdlog::warn("prefill {}: skipped: {}", a.prefill, *prefill_why);
  if (a.prefill > 0 && !prefill_why) {
    measured([&](int reps, StepTraces* traces) {
      return time_prefill(model, *backend.device, m, a.prefill, a.prefill_chunk, reps > 0 ? std::max(1, reps / 2) : 0,
                          traces);
    });
    if (logs)
      spdlog::info("prefill {}: {:.3f} ms (the host issued its steps in {:.3f} ms){}", a.prefill, rows.back().ms,
                   rows.back().enqueue_ms,
                   activations_note(rows.back(), m.config, prefill_step(a.prefill, a.prefill_chunk)));
  }
  const StepGraphStats g = model.graph_stats();
  if (logs)
    spdlog::info("bench step: decode steps {} eager, {} recorded, {} replayed ({} dropped, {} failed)", g.eager,
                 g.recorded, g.replayed, g.dropped, g.failed);
  return rows;
}

void run(const StepArgs& a) {
  const LoadedModel m = load_model(a.model, a.load.options());
  const ParallelLayout layout = plan_parallel(m.config, a.parallel);
  Backend backend = make_backend(a.backend, a.threads, parse_numerics(a.numerics));
  spdlog::info("bench step: {} (weights {}) on {}, {}", a.model, m.options.describe(), backend.description,
               layout.config.describe());
  std::vector<Row> rows;
  if (layout.config.world() == 1 && a.nodes.nnodes == 1) {
    rows = bench_rows(a, m, backend, ModelShard{layout});
  } else {  // the ranks' steps together: rank 0's times; the bytes and FLOPs are the whole model's
    const CommandRanks ranks{layout.config, backend.name, backend.numerics, a.threads, a.nodes};
    run_command_ranks(ranks, [&](RankContext& r) {
      std::vector<Row> mine = bench_rows(a, m, r.backend, r.shard(layout));
      if (r.local_rank == 0) rows = std::move(mine);  // this host's first rank (rank 0 on node 0)
    });
  }
  if (a.json) {
    for (const Row& r : rows)
      fmt::print("{}\n", nlohmann::json{{"test", r.test},
                                        {"backend", backend.name},
                                        {"numerics", numerics_name(backend.numerics)},
                                        {"parallel", layout.config.describe()},
                                        {"batch", r.batch},
                                        {"context", r.context},
                                        {"chunk", r.chunk},
                                        {"chunk_at", r.chunk_at},
                                        {"ms", r.ms},
                                        {"tokens_per_s", r.tokens_per_s},
                                        {"bytes", r.bytes},
                                        {"flops", r.flops},
                                        {"enqueue_ms", r.enqueue_ms},
                                        {"activation_bytes", r.activation_bytes},
                                        {"pool_slack_bytes", r.pool_slack_bytes},
                                        {"index_ms", r.index_ms},
                                        {"launch_ms", r.launch_ms},
                                        {"sync_ms", r.sync_ms},
                                        {"upload_ms", r.upload_ms},
                                        {"upload_bytes", r.upload_bytes},
                                        {"mode", r.mode},
                                        {"eager_error", r.eager_error},
                                        {"eager_argmax", r.eager_argmax}}
                             .dump());
    return;
  }
  fmt::print("| {:>7} | {:>5} | {:>8} | {:>6} | {:>10} | {:>10} | {:>14} | {:>16} | {:>13} |\n", "test", "batch",
             "context", "chunk", "ms", "tok/s", "GB read", "GB/s (bytes/ms)", "host issue ms");
  for (const Row& r : rows)
    fmt::print("| {:>7} | {:>5} | {:>8} | {:>6} | {:>10.3f} | {:>10.1f} | {:>14.3f} | {:>16.1f} | {:>13.3f} |\n",
               r.test, r.batch, r.context, r.chunk, r.ms, r.tokens_per_s, r.bytes / 1e9, r.bytes / 1e6 / r.ms,
               r.enqueue_ms);
}

}  // namespace

void setup_bench_step(CLI::App& cmd) {
  static StepArgs a;
  add_model_option(cmd, a.model);
  add_backend_flags(cmd, a.backend, a.threads);
  add_numerics_option(cmd, a.numerics)->group(kEngineFlagGroup);
  add_parallel_flags(cmd, a.parallel);
  add_node_flags(cmd, a.nodes);
  cmd.add_option("--batch", a.batches, "decode batch sizes (comma list)")->capture_default_str();
  cmd.add_option("--context", a.contexts, "decode contexts (comma list)")->capture_default_str();
  cmd.add_option("--prefill", a.prefill, "prefill tokens to time (0 = none)")->capture_default_str();
  cmd.add_option("--prefill-chunk", a.prefill_chunk,
                 "prefill in steps of this many tokens, as chunked prefill runs a long prompt (0 = one step)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("--mixed", a.mixed,
                 "per decode row, mixed steps: its decodes and a prompt chunk of each of these sizes (comma list), "
                 "as serving steps under load");
  cmd.add_option("--mixed-at", a.mixed_at,
                 "the mixed steps' chunk starts at this position of its prompt, whose earlier tokens are in the cache "
                 "(a later chunk of a long prompt; 0: its first)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd.add_option("-r,--repetitions", a.reps, "timed steps per row (median reported)")->capture_default_str();
  cmd.add_flag("--json", a.json, "one JSON object per row");
  cmd.add_flag("--enforce-eager", a.enforce_eager, "decode steps eagerly (no CUDA graphs)");
  cmd.add_flag("--compare-eager", a.compare_eager, "per decode row, the last step again eagerly: logit error, argmax");
  cmd.add_flag("--timeline", a.timeline,
               "after each row, its steps again with the device's kernel trace on (CUDA: CUPTI): span, busy and idle "
               "time, kernels by time");
  cmd.add_flag("--profile", a.profile, "after each row, one more step with per-op times (each op waited for)");
  add_load_flags(cmd, a.load);
  cmd.callback([] { run(a); });
}

}  // namespace dsv4::tools
