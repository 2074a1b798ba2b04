// Engine: continuous batching on its own thread, behind a small thread-safe API for the server and tools.
//
//   Engine engine(model.config, model.weights, config);       // sizes the KV cache, starts the loop
//   auto stream = engine.add_request({prompt_ids, sampling});  // throws dsv4::Error: rejected at admission
//   RequestOutput out = stream->read(100ms);                   // new tokens, then finish reason and usage
//   engine.abort(stream->id());                                // from any thread, at any point
//   EngineStats s = engine.stats();  bool ok = engine.healthy();
//
// Each loop iteration takes new requests and aborts, asks the Scheduler for a Schedule, runs it through
// the Executor (ModelRunner: forward + sampling), then appends the sampled tokens, checks stop conditions
// and pushes outputs. A request is rejected at admission when its prompt plus max_tokens exceeds
// max_model_len (which the cache always holds), nothing running is touched. An exception inside a step
// fails the requests of that step (finish reason kError with the message, blocks freed; every request if
// the scheduler itself threw) and marks the engine unhealthy; the other requests go on.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "core/model_config.h"
#include "engine/cache_sizing.h"
#include "engine/engine_config.h"
#include "engine/engine_stats.h"
#include "engine/executor.h"
#include "engine/request_stream.h"
#include "engine/sampling_params.h"
#include "kv/kv_cache_manager.h"
#include "kv/kv_memory.h"
#include "model/weights.h"
#include "sched/scheduler.h"

namespace dsv4 {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  std::string cache_salt;  // requests with different salts never share prefix-cache blocks
  int64_t priority = 0;    // lower runs earlier; only under the priority scheduling policy
};

class Engine {
 public:
  // Makes the executor over the engine's cache manager and backend (an empty Backend when the engine
  // was made without KV memory, as tests with fake executors do).
  using ExecutorFactory = std::function<std::unique_ptr<Executor>(KvCacheManager&, Backend&)>;

  // The model runs on config.backend (cpu, cuda or auto); the weights must outlive the engine. Throws dsv4::Error for
  // bad options (cache_sizing.h).
  Engine(const ModelConfig& model, const ModelWeights& weights, EngineConfig config);
  // Steps run through executors made by `factory` (tests); the pools get memory only when asked.
  Engine(const ModelConfig& model, EngineConfig config, ExecutorFactory factory, bool kv_memory = false);
  ~Engine();  // aborts what is unfinished and stops the loop
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  std::shared_ptr<RequestStream> add_request(GenerateRequest request);
  // Ends the request with kAbort and frees its blocks (at the next step boundary). False when it is
  // unknown or already finished.
  bool abort(RequestId id);
  EngineStats stats() const;
  bool healthy() const { return healthy_.load(); }
  // Stops the loop; unfinished requests end with kAbort. add_request refuses afterwards.
  void shutdown();

  const EngineConfig& config() const { return config_; }
  int64_t max_model_len() const { return cache_.max_model_len; }
  const KvCacheSetup& cache() const { return cache_; }

 private:
  struct Pending {
    RequestId id;
    GenerateRequest request;
    std::shared_ptr<RequestStream> stream;
    RequestPhases::Clock::time_point queued;
  };
  struct Live {
    std::shared_ptr<RequestStream> stream;
    SamplingParams params;
    int64_t prompt_len = 0;
    int64_t generated = 0;
    RequestPhases phases;
  };

  void validate(const GenerateRequest& r) const;
  void loop();
  bool take_inbox(std::vector<Pending>& adds, std::vector<RequestId>& aborts);
  void start(Pending& p);
  void step();
  void mark_scheduled(const Schedule& s);
  void apply(const Schedule& s, const std::vector<SampledToken>& sampled);
  void fail_step(const Schedule& s, const std::string& error);
  void fail_all(const std::string& error);
  void fail_unschedulable();
  Usage usage(RequestId id, const Live& l) const;
  void end(RequestId id, FinishReason reason, int32_t stop_token_id = -1, std::string error = {},
           const SampledToken* last = nullptr);
  void publish_stats();
  void count_group_pages(EngineStats& s);

  ModelConfig model_;
  EngineConfig config_;
  KvCacheSetup cache_;
  Backend backend_;  // before everything that holds its memory
  std::unique_ptr<KvMemoryAllocator> memory_;
  std::unique_ptr<KvMemoryAllocator> host_tier_memory_;  // the host tier's pages (kv_offload_bytes)
  std::unique_ptr<KvPageCopier> copier_;
  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> sched_;
  std::unique_ptr<Executor> executor_;

  // Shared with callers (under mu_).
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Pending> inbox_;
  std::vector<RequestId> aborts_;
  std::unordered_map<RequestId, std::shared_ptr<RequestStream>> live_;  // added, not yet finished
  bool stop_ = false;
  RequestId next_id_ = 1;
  uint64_t seed_base_ = 0;
  std::atomic<bool> healthy_{true};
  mutable std::mutex stats_mu_;
  EngineStats stats_;

  // Engine thread only.
  std::unordered_map<RequestId, Live> active_;
  EngineStats counters_;  // running totals; published with the snapshot
  std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
  double last_group_count_ = -1;
  std::thread thread_;
};

}  // namespace dsv4
