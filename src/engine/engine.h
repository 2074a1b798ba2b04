// Engine: the front end the server and tools talk to, over one engine replica (EngineCore) per
// data-parallel rank (--data-parallel-size; one by default). Thread-safe.
//
//   Engine engine(model.config, model.weights, config);       // sizes the KV cache, starts the loops
//   auto stream = engine.add_request({prompt_ids, sampling});  // throws dsv4::Error: rejected at admission
//   RequestOutput out = stream->read(100ms);                   // new tokens, then finish reason and usage
//   engine.abort(stream->id());                                // from any thread, at any point
//   EngineStats s = engine.stats();  bool ok = engine.healthy();
//
// Each replica has its own scheduler, KV cache manager and requests (engine/engine_core.h). A request
// goes where its prompt's prefix was sent before (its blocks are in that replica's prefix cache) unless
// that replica is much busier, else to the replica with the fewest unfinished requests
// (engine/replica_router.h); its id is unique across replicas, and a request without a seed samples
// the same tokens whichever replica serves it. A request is rejected at admission when its
// prompt plus max_tokens exceeds max_model_len (which every replica's cache holds); nothing running is
// touched. With expert parallelism the replicas step together (engine/step_lockstep.h).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/rank_group.h"
#include "engine/engine_core.h"
#include "engine/replica_router.h"

namespace dsv4 {

class Engine {
 public:
  using ExecutorFactory = EngineCore::ExecutorFactory;

  // The model runs on config.backend (cpu, cuda or auto) in config.parallel's layout; the weights must
  // outlive the engine. Throws dsv4::Error for bad options (cache_sizing.h) and layouts the engine cannot
  // serve.
  Engine(const ModelConfig& model, const ModelWeights& weights, EngineConfig config);
  // Steps run through executors made by `factory`, one per replica (tests); the pools get memory only
  // when asked.
  Engine(const ModelConfig& model, EngineConfig config, const ExecutorFactory& factory, bool kv_memory = false);
  ~Engine();  // aborts what is unfinished and stops the loops
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  std::shared_ptr<RequestStream> add_request(GenerateRequest request);
  // Ends the request with kAbort and frees its blocks (at the next step boundary). False when it is
  // unknown or already finished.
  bool abort(RequestId id);
  // Every replica's snapshot, summed (EngineStats::merge).
  EngineStats stats() const;
  bool healthy() const;
  // Stops the loops; unfinished requests end with kAbort. add_request refuses afterwards.
  void shutdown();

  // The first replica's resolved configuration (every replica has the same).
  const EngineConfig& config() const { return cores_.front()->config(); }
  int64_t max_model_len() const { return cache().max_model_len; }
  const KvCacheSetup& cache() const { return cores_.front()->cache(); }
  int replicas() const { return static_cast<int>(cores_.size()); }
  // One replica's own snapshot (tests, per-replica logs).
  EngineStats replica_stats(int replica) const { return cores_.at(static_cast<size_t>(replica))->stats(); }

 private:
  void make_cores(const ModelConfig& model, const EngineConfig& config, const RankPlacement& placement,
                  const std::function<ExecutorFactory(int replica)>& factory_of, bool kv_memory);
  // Lockstep replicas all come back to their gate when one of them has something new.
  void wake_peers();

  std::unique_ptr<StepLockstep> lockstep_;  // expert parallelism across replicas only
  std::shared_ptr<RankGroup> world_;        // every rank of every replica, with the lockstep
  std::vector<std::unique_ptr<EngineCore>> cores_;
  std::atomic<RequestId> next_id_{1};
  std::mutex route_mu_;
  std::unique_ptr<ReplicaRouter> router_;  // several replicas only
};

}  // namespace dsv4
