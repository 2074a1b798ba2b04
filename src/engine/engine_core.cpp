#include "engine/engine_core.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <unordered_set>

#include "core/error.h"
#include "engine/cache_config_info.h"
#include "engine/stop_check.h"
#include "model/device_kv_memory.h"

namespace dsv4 {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}
double seconds_since(Clock::time_point t0) { return seconds_between(t0, Clock::now()); }

// GPU KV budget (vLLM's --gpu-memory-utilization): the share of the device's memory left after the
// weights, the backend's own workspace for a step (Ops::step_workspace_bytes) and a reserve for one
// step's activations (a prefill chunk's widest tensors, with margin), recordings and logits.
// Ranks sharing one GPU (more ranks than GPUs) share its memory equally.
int64_t gpu_kv_budget(const EngineConfig& c, const ModelConfig& m, const Device& dev, Ops& ops, int ranks_per_gpu) {
  DSV4_CHECK(c.gpu_memory_utilization > 0 && c.gpu_memory_utilization <= 1,
             "--gpu-memory-utilization must lie in (0, 1], got {}", c.gpu_memory_utilization);
  const double usable = c.gpu_memory_utilization * static_cast<double>(dev.memory_capacity()) / ranks_per_gpu;
  // Recorded decode steps (model/step_graphs.h) keep their graphs' memory and a shared logits buffer.
  const double graphs = c.enforce_eager ? 0.0 : 1.0 * (1 << 30);
  const double workspace = static_cast<double>(ops.step_workspace_bytes(m, c.max_num_batched_tokens));
  const double reserve = workspace + graphs +
                         static_cast<double>(step_activation_reserve(m, c.max_num_batched_tokens)) +
                         static_cast<double>(c.max_num_seqs) * static_cast<double>(m.vocab_size) * 8;
  const double budget = usable - static_cast<double>(c.weight_bytes) - reserve;
  DSV4_CHECK(budget > 0,
             "--gpu-memory-utilization {}: {:.1f} GiB of the GPU's {:.1f} GiB (a rank's share) leaves nothing for the "
             "KV cache after "
             "{:.1f} GiB of weights and a {:.1f} GiB reserve (the backend's workspace and a step's activations)",
             c.gpu_memory_utilization, usable / (1 << 30), static_cast<double>(dev.memory_capacity()) / (1 << 30),
             static_cast<double>(c.weight_bytes) / (1 << 30), reserve / (1 << 30));
  // What the backend could use to run faster, out of what the KV pools could never use.
  const int64_t wanted = ops.optional_workspace_bytes(m);
  const int64_t grant = optional_workspace_grant(m, c, static_cast<int64_t>(budget), wanted);
  ops.grant_optional_workspace(grant);
  if (wanted > 0) {
    spdlog::info(
        "engine: {:.1f} GiB of the {:.1f} GiB of optional backend workspace granted (KV pools for "
        "--max-num-seqs requests of --max-model-len come first)",
        static_cast<double>(grant) / (1 << 30), static_cast<double>(wanted) / (1 << 30));
  }
  return static_cast<int64_t>(budget) - grant;
}

}  // namespace

EngineCore::EngineCore(const ModelConfig& model, EngineConfig config, const ExecutorFactory& factory, bool kv_memory,
                       Replica replica)
    : model_(model), config_(std::move(config)), replica_(replica) {
  if (kv_memory) {  // a real model: its backend, and KV pools in that backend's memory
    if (!config_.numerics.empty()) {
      DSV4_CHECK(parse_numerics(config_.numerics), "engine: numerics \"{}\" is neither exact nor fast",
                 config_.numerics);
    }
    backend_ = make_backend(config_.backend, cpu_threads_per_rank(config_.threads, config_.parallel.world()),
                            parse_numerics(config_.numerics), replica_.gpu);
    config_.backend = backend_.name;
    config_.numerics = numerics_name(backend_.numerics);
    memory_ = kv_memory_for(*backend_.device);
    if (backend_.device->host_memory()) {
      host_tier_memory_ = std::make_unique<HostKvMemory>();
    } else {
      host_tier_memory_ = std::make_unique<PinnedKvMemory>(*backend_.device);
    }
    copier_ = std::make_unique<DeviceKvPageCopier>(*backend_.device);
  }
  // The step budget's default depends on the GPU (none: the CPU's), and the GPU's KV budget on the step budget.
  const bool gpu = kv_memory && !backend_.device->host_memory();
  config_.max_num_batched_tokens = resolve_max_num_batched_tokens(
      config_.max_num_batched_tokens, gpu ? static_cast<int64_t>(backend_.device->memory_capacity()) : 0);
  // Optional backend workspace only where the memory plan below grants it (an explicit --kv-cache-memory: none).
  if (gpu) backend_.ops->grant_optional_workspace(0);
  if (gpu && config_.kv_cache_memory == 0)
    config_.kv_cache_memory = gpu_kv_budget(config_, model_, *backend_.device, *backend_.ops, replica_.ranks_per_gpu);
  // Every rank keeps its own host tier of this size: "auto" shares the host's memory among them.
  config_.kv_offload_bytes =
      resolve_kv_offload_bytes(config_.kv_offload_bytes, available_host_memory() / config_.parallel.world());
  // Every rank holds its replica's whole KV: the ranks of every replica share the host's default budget.
  if (kv_memory && backend_.device->host_memory() && config_.kv_cache_memory == 0 && config_.parallel.world() > 1)
    config_.kv_cache_memory = default_kv_cache_memory() / config_.parallel.world();
  cache_ = plan_kv_cache(model_, config_);
  if (!cache_.warning.empty()) spdlog::warn("{}", cache_.warning);
  config_.max_model_len = cache_.max_model_len;
  config_.kv_cache_memory = cache_.kv_cache_memory;
  KvCacheOptions o;
  o.enable_prefix_caching = config_.enable_prefix_caching;
  o.retention_interval = config_.prefix_cache_retention_interval;
  o.max_model_len = cache_.max_model_len;
  o.memory = memory_.get();
  if (config_.kv_offload_bytes > 0 && !config_.enable_prefix_caching) {
    spdlog::warn("--kv-offload-bytes {} ignored: the host tier keeps prefix-cache blocks, and prefix caching is off",
                 config_.kv_offload_bytes);
  }
  o.host_tier_bytes = config_.kv_offload_bytes;
  o.host_memory = host_tier_memory_.get();
  o.copier = copier_.get();
  kv_ = std::make_unique<KvCacheManager>(cache_.layout, cache_.pool_pages, o);
  sched_ = std::make_unique<Scheduler>(config_.scheduler(), *kv_);
  counters_.requests = RequestHistograms(cache_.max_model_len);
  counters_.cache_config = std::make_shared<const InfoLabels>(cache_config_info(config_, cache_, model_));
  executor_ = factory(*kv_, backend_);
  spdlog::info(
      "engine{}: backend {} ({}), max_model_len {}, max_num_seqs {}, max_num_batched_tokens {}, KV pools {} B of "
      "--kv-cache-memory {} B, prefix caching {}, chunked prefill policy {}",
      config_.parallel.dp > 1 ? fmt::format(" replica {}", replica_.index) : "", config_.backend, backend_.description,
      cache_.max_model_len, config_.max_num_seqs, config_.max_num_batched_tokens, cache_.pool_bytes,
      cache_.kv_cache_memory, config_.enable_prefix_caching ? "on" : "off",
      chunk_policy_name(config_.chunked_prefill_policy));
  publish_stats();
}

void EngineCore::launch() {
  DSV4_CHECK(!thread_.joinable(), "engine replica {}: launched twice", replica_.index);
  thread_ = std::thread([this] { loop(); });
}

EngineCore::~EngineCore() {
  request_stop();
  join();
}

void EngineCore::request_stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
}

void EngineCore::join() {
  if (thread_.joinable()) thread_.join();
}

void EngineCore::wake() {
  { std::lock_guard lock(mu_); }  // a loop between its look at the gate's epoch and its wait is not missed
  cv_.notify_all();
}

size_t EngineCore::load() const {
  std::lock_guard lock(mu_);
  return live_.size();
}

void EngineCore::validate(const GenerateRequest& r) const {
  DSV4_CHECK(!r.prompt.empty(), "the prompt is empty");
  for (size_t i = 0; i < r.prompt.size(); ++i) {
    DSV4_CHECK(r.prompt[i] >= 0 && r.prompt[i] < model_.vocab_size,
               "prompt token {} at position {} is outside the model's vocabulary [0, {})", r.prompt[i], i,
               model_.vocab_size);
  }
  r.sampling.validate(model_.vocab_size);
  DSV4_CHECK(r.priority == 0 || config_.scheduling_policy == SchedulingPolicy::kPriority,
             "priority {} needs the priority scheduling policy (--scheduling-policy priority)", r.priority);
  const int64_t total = static_cast<int64_t>(r.prompt.size()) + r.sampling.max_tokens;
  DSV4_CHECK(total <= cache_.max_model_len,
             "the prompt ({} tokens) plus max_tokens ({}) is {} tokens, more than max_model_len {}", r.prompt.size(),
             r.sampling.max_tokens, total, cache_.max_model_len);
  DSV4_CHECK(total <= cache_.largest_request,
             "the prompt ({} tokens) plus max_tokens ({}) is {} tokens: one request of that length needs {} B of KV "
             "cache and can never fit (the pools hold at most {} positions for one request)",
             r.prompt.size(), r.sampling.max_tokens, total, request_kv_bytes(cache_.layout, total),
             cache_.largest_request);
}

std::shared_ptr<RequestStream> EngineCore::add_request(RequestId id, GenerateRequest request) {
  validate(request);
  std::shared_ptr<RequestStream> stream;
  {
    std::lock_guard lock(mu_);
    DSV4_CHECK(!stop_, "the engine is shut down");
    stream = std::make_shared<RequestStream>(id);
    live_.emplace(id, stream);
    inbox_.push_back({id, std::move(request), stream, Clock::now()});
  }
  cv_.notify_all();
  return stream;
}

bool EngineCore::abort(RequestId id) {
  {
    std::lock_guard lock(mu_);
    if (!live_.count(id)) return false;
    aborts_.push_back(id);
  }
  cv_.notify_all();
  return true;
}

EngineStats EngineCore::stats() const {
  std::lock_guard lock(stats_mu_);
  EngineStats s = stats_;
  s.healthy = healthy_;  // the snapshot is published after the step; health is known at once
  return s;
}

// Waits for something to do; false when asked to stop. Under lockstep the loop also comes back when
// woken (a peer got work) and at once after a decision to step (its peers may step again).
bool EngineCore::take_inbox(std::vector<Pending>& adds, std::vector<RequestId>& aborts) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] {
    const bool noted = replica_.lockstep != nullptr && replica_.lockstep->noted_since(gate_epoch_);
    return stop_ || !inbox_.empty() || !aborts_.empty() || sched_->has_work() || keep_stepping_ || noted;
  });
  if (stop_) return false;
  std::swap(adds, inbox_);
  std::swap(aborts, aborts_);
  return true;
}

void EngineCore::loop() {
  if (backend_.device) backend_.device->bind_thread();  // the replica's first rank runs here
  std::vector<Pending> adds;
  std::vector<RequestId> aborts;
  for (;;) {
    const bool stopping = !take_inbox(adds, aborts);
    for (Pending& p : adds) start(p);
    for (RequestId id : aborts) end(id, FinishReason::kAbort);
    adds.clear();
    aborts.clear();
    const auto t0 = Clock::now();
    const Schedule s = !stopping && sched_->has_work() ? next_schedule() : Schedule{};
    const auto scheduled = Clock::now();
    if (replica_.lockstep != nullptr) {
      // A replica with work but no batch (its next request waits for a restore) keeps every peer
      // coming back: one asleep would leave it alone at the gate once its batch is ready.
      const StepLockstep::Decision d = replica_.lockstep->arrive(!s.empty(), !stopping && sched_->has_work(), stopping);
      if (d.stop) break;
      keep_stepping_ = d.busy;
      gate_epoch_ = d.epoch;
      if (s.empty() && d.step) idle_step();
    } else if (stopping) {
      break;
    }
    if (!s.empty()) run(s, t0, scheduled);
    publish_stats();
    // Nothing could run while a prefix comes back from the host tier: look again shortly, not at once.
    if (s.empty() && kv_->restores_in_flight() > 0) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  {
    std::lock_guard lock(mu_);
    std::swap(adds, inbox_);
  }
  for (Pending& p : adds) {
    p.stream->finish(FinishReason::kAbort, {static_cast<int64_t>(p.request.prompt.size()), 0, 0});
    std::lock_guard lock(mu_);
    live_.erase(p.id);
  }
  std::vector<RequestId> ids;
  for (const auto& [id, l] : active_) ids.push_back(id);
  for (RequestId id : ids) end(id, FinishReason::kAbort);
  publish_stats();
}

void EngineCore::start(Pending& p) {
  const auto prompt_len = static_cast<int64_t>(p.request.prompt.size());
  try {
    executor_->add_request(p.id, p.request.sampling, p.request.prompt, replica_.seed_base + p.id);
    sched_->add(p.id, std::move(p.request.prompt), std::move(p.request.cache_salt), p.request.priority,
                p.request.sampling.prompt_logprobs >= 0);
  } catch (const std::exception& e) {
    executor_->remove_request(p.id);
    p.stream->finish(FinishReason::kError, {prompt_len, 0, 0}, -1, e.what());
    std::lock_guard lock(mu_);
    live_.erase(p.id);
    return;
  }
  active_.emplace(p.id, Live{p.stream, p.request.sampling, prompt_len, 0, {p.queued, {}, {}, {}}});
  ++counters_.requests_added;
  counters_.prompt_tokens += prompt_len;
}

Schedule EngineCore::next_schedule() {
  Schedule s;
  try {
    s = sched_->schedule();
  } catch (const std::exception& e) {
    fail_all(e.what());  // which requests it was handling is unknown
    return {};
  }
  if (sched_->stuck(s)) fail_unschedulable();
  return s;
}

void EngineCore::run(const Schedule& s, Clock::time_point t0, Clock::time_point scheduled) {
  mark_scheduled(s);
  Clock::time_point executed;
  const double waited = backend_.device ? backend_.device->waited_seconds() : 0;
  const StepGraphStats graphs = executor_->graph_stats();
  try {
    const std::vector<SampledToken> sampled = executor_->execute(s);
    executed = Clock::now();
    const auto want = std::count_if(s.chunks.begin(), s.chunks.end(), [](const ScheduledChunk& c) { return c.sample; });
    DSV4_CHECK(static_cast<int64_t>(sampled.size()) == want, "the step returned {} tokens for {} sampling chunks",
               sampled.size(), want);
    hand_prompt_logprobs();
    apply(s, sampled);
  } catch (const std::exception& e) {
    fail_step(s, e.what());
    return;
  }
  const auto done = Clock::now();
  const double dt = seconds_between(t0, done);
  sched_->observe_step(s, dt);
  counters_.steps.add(dt);
  counters_.steps.schedule_seconds += seconds_between(t0, scheduled);
  const double execute = seconds_between(scheduled, executed);
  counters_.steps.execute_seconds += execute;
  counters_.steps.outputs_seconds += seconds_between(executed, done);
  const double wait = backend_.device ? backend_.device->waited_seconds() - waited : 0;
  counters_.steps.execute_wait_seconds += wait;
  const StepGraphStats g = executor_->graph_stats();
  if (g.replayed + g.recorded > graphs.replayed + graphs.recorded) {
    StepTimes& t = counters_.steps;
    ++t.graph_steps;
    t.graph_execute_seconds += execute;
    t.graph_wait_seconds += wait;
    t.graph_index_seconds += g.index_ms / 1e3;
    t.graph_launch_seconds += g.launch_ms / 1e3;
  }
  counters_.computed_tokens += s.num_tokens();
  counters_.iteration_tokens.observe(static_cast<double>(s.num_tokens()));
}

// Nothing of this replica's to run while a peer steps: its ranks serve the peers' expert rows.
void EngineCore::idle_step() {
  try {
    executor_->idle_step();
    ++counters_.idle_steps;
  } catch (const std::exception& e) {
    spdlog::error("engine replica {}: an idle step failed: {}", replica_.index, e.what());
    healthy_ = false;
    ++counters_.failed_steps;
  }
}

// The first step of a request ends its queue phase (a preempted one keeps its first time, as in vLLM).
// A decode chunk follows a computed context, so its request was scheduled before: only prefills look.
void EngineCore::mark_scheduled(const Schedule& s) {
  const auto now = Clock::now();
  for (const ScheduledChunk& c : s.chunks) {
    if (c.decode) continue;
    const auto it = active_.find(c.id);
    if (it != active_.end() && !it->second.phases.scheduled) it->second.phases.scheduled = now;
  }
}

void EngineCore::hand_prompt_logprobs() {
  for (auto& [id, scored] : executor_->take_prompt_logprobs()) {
    const auto it = active_.find(id);
    if (it == active_.end()) continue;
    Live& l = it->second;
    std::vector<PromptLogprob> fresh;
    for (PromptLogprob& p : scored) {
      if (p.position != l.scored || p.position >= l.prompt_len) continue;
      ++l.scored;
      fresh.push_back(std::move(p));
    }
    if (!fresh.empty()) l.stream->add_prompt_logprobs(fresh);
  }
}

void EngineCore::apply(const Schedule& s, const std::vector<SampledToken>& sampled) {
  const auto now = Clock::now();
  size_t k = 0;
  for (const ScheduledChunk& c : s.chunks) {
    if (!c.sample) continue;
    const SampledToken& t = sampled[k++];
    const auto it = active_.find(c.id);
    if (it == active_.end()) continue;
    Live& l = it->second;
    sched_->append_token(c.id, t.token);
    ++l.generated;
    ++counters_.generation_tokens;
    if (!l.phases.first_token) l.phases.first_token = now;
    l.phases.last_token = now;
    const Usage u = usage(c.id, l);
    if (l.generated == 1) counters_.cached_prompt_tokens += u.cached_tokens;
    const auto stop = check_stop(l.params, t.token, l.generated, u.prompt_tokens + l.generated, cache_.max_model_len,
                                 static_cast<int32_t>(model_.eos_token_id));
    if (stop)
      end(c.id, stop->reason, stop->stop_token_id, {}, &t);
    else
      l.stream->push(t, u);
  }
}

void EngineCore::fail_step(const Schedule& s, const std::string& error) {
  spdlog::error("engine: a step of {} requests failed: {}", s.chunks.size(), error);
  healthy_ = false;
  ++counters_.failed_steps;
  for (const ScheduledChunk& c : s.chunks) end(c.id, FinishReason::kError, -1, error);
}

void EngineCore::fail_all(const std::string& error) {
  spdlog::error("engine: scheduling failed, failing all {} requests: {}", active_.size(), error);
  healthy_ = false;
  ++counters_.failed_steps;
  std::vector<RequestId> ids;
  for (const auto& [id, l] : active_) ids.push_back(id);
  for (RequestId id : ids) end(id, FinishReason::kError, -1, error);
}

// Nothing runs and the next waiting request cannot start: it never will (the cache holds max_model_len,
// so this means a broken invariant); fail it rather than spin.
void EngineCore::fail_unschedulable() {
  const RequestId id = sched_->next_waiting();
  if (id == 0) return;
  healthy_ = false;
  end(id, FinishReason::kError, -1, "the request cannot be scheduled: the KV cache has no room for it");
}

Usage EngineCore::usage(RequestId id, const Live& l) const {
  const SchedRequest* r = sched_->find(id);
  return {l.prompt_len, l.generated, r != nullptr ? std::max<int64_t>(0, r->num_cached_prompt) : 0};
}

void EngineCore::end(RequestId id, FinishReason reason, int32_t stop_token_id, std::string error,
                     const SampledToken* last) {
  const auto it = active_.find(id);
  if (it == active_.end()) return;
  const Usage u = usage(id, it->second);
  try {
    sched_->finish(id);
    executor_->remove_request(id);
  } catch (const std::exception& e) {  // the stream must end whatever happens
    spdlog::error("engine: releasing request {} failed: {}", id, e.what());
    healthy_ = false;
  }
  {  // unfinished no longer (the front end's balance) before the caller can see the end
    std::lock_guard lock(mu_);
    live_.erase(id);
  }
  it->second.stream->finish(reason, u, stop_token_id, std::move(error), last);
  if (reason != FinishReason::kError) {
    counters_.requests.observe(it->second.phases, u.prompt_tokens, u.completion_tokens, it->second.params.max_tokens);
  }
  active_.erase(it);
  switch (reason) {
    case FinishReason::kAbort:
      ++counters_.requests_aborted;
      break;
    case FinishReason::kError:
      ++counters_.requests_failed;
      break;
    default:
      ++counters_.requests_finished;
      break;
  }
}

namespace {

KvHostTierUsage host_tier_usage(const KvCacheStats& k) {
  KvHostTierUsage u{0,
                    0,
                    k.host_hits,
                    k.host_restored_tokens,
                    k.offload_bytes,
                    k.restore_bytes,
                    0,
                    k.restore_seconds,
                    k.restore_copy_seconds};
  for (const KvHostTierStats& p : k.host_pools) {
    u.capacity_bytes += p.capacity_pages * p.page_bytes;
    u.used_bytes += p.used_pages * p.page_bytes;
    u.evictions += p.evictions;
  }
  return u;
}

}  // namespace

void EngineCore::publish_stats() {
  EngineStats s = counters_;
  s.healthy = healthy_;
  s.running = sched_->num_running();
  s.waiting = sched_->num_waiting();
  s.preempted_waiting = sched_->num_preempted_waiting();
  s.preemptions = sched_->num_preemptions();
  const KvCacheStats k = kv_->stats();
  for (const KvPoolStats& p : k.pools) {
    s.pools.push_back({p.page_bytes, p.capacity_pages, p.used_pages, p.cached_pages, p.free_pages});
  }
  const KvLayout& lay = kv_->layout();
  for (size_t g = 0; g < k.groups.size(); ++g) {
    const KvGroupStats& kg = k.groups[g];
    const int unit = lay.unit_of_group[g];
    s.groups.push_back({kg.name, lay.units[static_cast<size_t>(unit)].bucket, 0, kg.lookups, kg.hits, kg.query_tokens,
                        kg.hit_tokens, kg.cached_blocks, kg.host_offloaded_blocks, kg.host_restored_blocks,
                        kg.host_offload_bytes, kg.host_restore_bytes});
  }
  s.prefix_query_tokens = k.query_tokens;
  s.prefix_hit_tokens = k.hit_tokens;
  s.host_tier = host_tier_usage(k);
  if (executor_) s.graphs = executor_->graph_stats();
  if (backend_.device) {
    const Device::MemoryUse u = backend_.device->memory_use();
    s.device_memory_used = u.current, s.device_memory_peak = u.peak;
  }
  count_group_pages(s);
  std::lock_guard lock(stats_mu_);
  stats_ = std::move(s);
}

// Distinct blocks the running requests hold per unit; at most every 100 ms (it walks every block table).
void EngineCore::count_group_pages(EngineStats& s) {
  const double now = seconds_since(created_);
  const KvLayout& lay = kv_->layout();
  if (last_group_count_ >= 0 && now - last_group_count_ < 0.1 && sched_->num_running() > 0) {
    const EngineStats previous = stats();
    for (size_t g = 0; g < s.groups.size() && g < previous.groups.size(); ++g) {
      s.groups[g].used_pages = previous.groups[g].used_pages;
    }
    return;
  }
  last_group_count_ = now;
  for (size_t u = 0; u < lay.units.size(); ++u) {
    std::unordered_set<uint32_t> blocks;
    for (const SchedRequest* r : sched_->running()) {
      for (uint32_t b : kv_->block_table(r->id, static_cast<int>(u)).blocks) blocks.insert(b);
    }
    const int64_t pages = static_cast<int64_t>(blocks.size()) * lay.units[u].num_layers();
    for (int g : lay.units[u].groups) s.groups[static_cast<size_t>(g)].used_pages = pages;
  }
}

}  // namespace dsv4
