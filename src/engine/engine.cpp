#include "engine/engine.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <random>

#include "core/error.h"
#include "engine/model_runner.h"
#include "model/placed_weights.h"
#include "model/weight_shard.h"

namespace dsv4 {
namespace {

// Device bytes of the first rank's weights (all of them on one rank).
EngineConfig with_weight_bytes(EngineConfig c, const ModelConfig& model, const ModelWeights& weights) {
  const ModelWeights mine = shard_weights(weights, model, plan_parallel(model, c.parallel), 0);
  c.weight_bytes = static_cast<int64_t>(PlacedWeights::bytes_needed(mine, model));
  return c;
}

// The options every replica shares, resolved once.
EngineConfig resolved(EngineConfig c, const ModelConfig& model) {
  DSV4_CHECK(c.vocab_limit >= 0, "engine: vocab_limit must not be negative");
  c.vocab_limit = c.vocab_limit > 0 ? std::min(c.vocab_limit, model.vocab_size) : model.vocab_size;
  plan_parallel(model, c.parallel);  // a layout the model cannot take is refused here
  return c;
}

}  // namespace

Engine::Engine(const ModelConfig& model, const ModelWeights& weights, EngineConfig config) {
  const EngineConfig c = resolved(with_weight_bytes(std::move(config), model, weights), model);
  const ParallelLayout layout = plan_parallel(model, c.parallel);
  const int threads = cpu_threads_per_rank(c.threads, c.parallel.world());
  const RankPlacement placement = place_ranks(c.backend, c.parallel.world());
  if (c.parallel.world() > 1)
    spdlog::info("engine: {}, {}", c.parallel.describe(), placement.describe(c.parallel.world()));
  make_cores(
      model, c, placement,
      [&](int replica) -> ExecutorFactory {
        return [&, replica](KvCacheManager& kv, Backend& backend) -> std::unique_ptr<Executor> {
          auto runner =
              std::make_unique<ModelRunner>(model, weights, kv, c.kv_dtypes, backend, c.vocab_limit, layout, threads,
                                            ReplicaPlace{replica, placement, world_, c.collective_timeout});
          if (c.enforce_eager) runner->model().set_step_mode(StepMode::kEager);
          return runner;
        };
      },
      true);
}

Engine::Engine(const ModelConfig& model, EngineConfig config, const ExecutorFactory& factory, bool kv_memory) {
  make_cores(
      model, resolved(std::move(config), model), RankPlacement{}, [&](int) { return factory; }, kv_memory);
}

void Engine::make_cores(const ModelConfig& model, const EngineConfig& config, const RankPlacement& placement,
                        const std::function<ExecutorFactory(int replica)>& factory_of, bool kv_memory) {
  const ParallelLayout layout = plan_parallel(model, config.parallel);
  const int dp = config.parallel.dp, tp = config.parallel.tp;
  if (dp > 1 && layout.ep_size > 1) {
    lockstep_ = std::make_unique<StepLockstep>(dp);
    world_ = std::make_shared<RankGroup>(placement.kind, config.parallel.world(), config.collective_timeout);
  }
  const uint64_t seed_base = (uint64_t{std::random_device{}()} << 32) ^ std::random_device{}();
  for (int d = 0; d < dp; ++d) {
    const EngineCore::Replica replica{d, lockstep_.get(), seed_base, placement.gpu_of(d * tp), placement.ranks_per_gpu};
    cores_.push_back(std::make_unique<EngineCore>(model, config, factory_of(d), kv_memory, replica));
  }
  if (dp > 1) router_ = std::make_unique<ReplicaRouter>(dp);
  for (auto& c : cores_) c->launch();
}

Engine::~Engine() { shutdown(); }

void Engine::shutdown() {
  for (auto& c : cores_) c->request_stop();
  for (auto& c : cores_) c->join();
}

void Engine::wake_peers() {
  if (!lockstep_) return;
  lockstep_->note_work();  // before the wakes: a replica woken early still finds it noted at the gate
  for (auto& c : cores_) c->wake();
}

std::shared_ptr<RequestStream> Engine::add_request(GenerateRequest request) {
  size_t replica = 0;
  if (router_) {
    std::vector<size_t> loads;
    for (const auto& c : cores_) loads.push_back(c->load());
    const std::vector<uint64_t> hashes = ReplicaRouter::block_hashes(request.prompt, request.cache_salt);
    std::lock_guard lock(route_mu_);  // hashed before: a long prompt's hashing holds up no other request
    replica = static_cast<size_t>(router_->route(hashes, loads));
  }
  auto stream = cores_[replica]->add_request(next_id_++, std::move(request));
  wake_peers();
  return stream;
}

bool Engine::abort(RequestId id) {
  for (auto& c : cores_) {
    if (!c->abort(id)) continue;
    wake_peers();
    return true;
  }
  return false;
}

EngineStats Engine::stats() const {
  EngineStats s = cores_.front()->stats();
  for (size_t d = 1; d < cores_.size(); ++d) s.merge(cores_[d]->stats());
  return s;
}

bool Engine::healthy() const {
  return std::all_of(cores_.begin(), cores_.end(), [](const auto& c) { return c->healthy(); });
}

}  // namespace dsv4
