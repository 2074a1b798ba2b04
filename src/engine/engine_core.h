// EngineCore: one data-parallel replica of the engine: continuous batching on its own thread over its
// own scheduler, KV cache manager and executor (a ModelRunner and its tensor-parallel ranks). The Engine
// (engine/engine.h) is the front end over one or more of them.
//
// Each loop iteration takes new requests and aborts, asks the Scheduler for a Schedule, runs it through
// the Executor (ModelRunner: forward + sampling), then appends the sampled tokens, checks stop conditions
// and pushes outputs. An exception inside a step fails the requests of that step (finish reason kError
// with the message, blocks freed; every request if the scheduler itself threw) and marks the replica
// unhealthy; the other requests go on. Replicas whose ranks exchange expert rows step together through a
// StepLockstep (engine/step_lockstep.h): one with nothing scheduled runs an idle step beside the others.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
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
#include "engine/step_lockstep.h"
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

class EngineCore {
 public:
  // Makes the executor over the replica's cache manager and backend (an empty Backend when the replica
  // was made without KV memory, as tests with fake executors do).
  using ExecutorFactory = std::function<std::unique_ptr<Executor>(KvCacheManager&, Backend&)>;

  // Where the replica stands among its peers.
  struct Replica {
    int index = 0;
    StepLockstep* lockstep = nullptr;  // shared by every replica when their ranks exchange expert rows
    uint64_t seed_base = 0;            // a request without a seed samples with seed_base + its id
    int gpu = 0;                       // the GPU of the replica's first rank
    int ranks_per_gpu = 1;             // ranks sharing that GPU's memory
  };

  // Throws dsv4::Error for bad options (cache_sizing.h). With `kv_memory` the pools get the backend's memory.
  EngineCore(const ModelConfig& model, EngineConfig config, const ExecutorFactory& factory, bool kv_memory,
             Replica replica);
  ~EngineCore();  // aborts what is unfinished and stops the loop
  EngineCore(const EngineCore&) = delete;
  EngineCore& operator=(const EngineCore&) = delete;

  // Starts the loop. The front end starts its replicas once all are made: lockstep replicas wait for
  // one another from their first iteration.
  void launch();

  // Throws dsv4::Error for a request this replica can never serve.
  void validate(const GenerateRequest& r) const;
  // `id` is the front end's, unique across replicas.
  std::shared_ptr<RequestStream> add_request(RequestId id, GenerateRequest request);
  // Ends the request with kAbort and frees its blocks (at the next step boundary). False when it is
  // unknown here or already finished.
  bool abort(RequestId id);
  // Requests added and not finished: what the front end balances.
  size_t load() const;
  // Lockstep: brings the loop back to the gate (the front end wakes every replica when one gets work).
  void wake();
  EngineStats stats() const;
  bool healthy() const { return healthy_.load(); }
  // Asks the loop to stop; join() waits for it. Unfinished requests end with kAbort.
  void request_stop();
  void join();

  const EngineConfig& config() const { return config_; }
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
    int64_t scored = 1;  // prompt_logprobs: the next prompt position its stream has not got
  };

  void loop();
  bool take_inbox(std::vector<Pending>& adds, std::vector<RequestId>& aborts);
  void start(Pending& p);
  // The next batch: empty when there is none (or scheduling failed, which ends its requests).
  Schedule next_schedule();
  // t0: when making the schedule began; scheduled: when it was made.
  void run(const Schedule& s, std::chrono::steady_clock::time_point t0,
           std::chrono::steady_clock::time_point scheduled);
  void idle_step();
  void mark_scheduled(const Schedule& s);
  // The scored prompt tokens of the step to their streams, each position once (a recompute after a
  // preemption scores the prompt again).
  void hand_prompt_logprobs();
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
  Replica replica_;
  std::atomic<bool> healthy_{true};
  mutable std::mutex stats_mu_;
  EngineStats stats_;

  // Engine thread only.
  std::unordered_map<RequestId, Live> active_;
  EngineStats counters_;  // running totals; published with the snapshot
  std::chrono::steady_clock::time_point created_ = std::chrono::steady_clock::now();
  double last_group_count_ = -1;
  bool keep_stepping_ = false;  // lockstep: some replica had work at the last gate, so arrive again at once
  uint64_t gate_epoch_ = 0;     // lockstep: the work noted when the last gate decided (wakes on newer)
  std::thread thread_;
};

}  // namespace dsv4
