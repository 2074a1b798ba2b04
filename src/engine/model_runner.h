// ModelRunner: schedule -> ForwardBatch -> Model::forward_greedy (every request plain greedy) or
// Model::step then Model::sample (rows, edits and allow-sets from the Sampler, made on a HostWorker while
// the step's forward runs) -> tokens recorded by the Sampler.
//
// The batch holds the chunks' ids and positions; block tables and slot mappings reach the model through
// PagedKv (the KvAccess over the engine's KvCacheManager): the runner binds the batch's sequence i to the
// i-th chunk's request, and the model's StepIndex resolves every slot through that request's block
// tables (kv_cache_manager.h). Only chunks that sample ask for logits.
#pragma once

#include <memory>
#include <unordered_map>

#include "backend/backend.h"
#include "core/model_config.h"
#include "engine/executor.h"
#include "engine/host_worker.h"
#include "engine/replica_ranks.h"
#include "kv/kv_cache_manager.h"
#include "model/forward_batch.h"
#include "model/model.h"
#include "model/paged_kv.h"
#include "model/weights.h"

namespace dsv4 {

class ModelRunner final : public Executor {
 public:
  // `manager` must have pool memory; `vocab_limit` is the tokenizer's size (0 = the model's vocab). With a
  // layout of several ranks, this runner's model is the first rank of replica `place` and the replica's
  // other ranks run beside it (engine/replica_ranks.h), each on a backend like `backend` with
  // `rank_threads` threads.
  ModelRunner(const ModelConfig& cfg, const ModelWeights& weights, KvCacheManager& manager, KvDTypes dtypes,
              Backend& backend, int64_t vocab_limit, const ParallelLayout& layout, int rank_threads,
              ReplicaPlace place = {});
  ModelRunner(const ModelConfig& cfg, const ModelWeights& weights, KvCacheManager& manager, KvDTypes dtypes,
              Backend& backend, int64_t vocab_limit);
  ~ModelRunner() override;

  void add_request(RequestId id, const SamplingParams& params, std::span<const int32_t> prompt, uint64_t seed) override;
  void remove_request(RequestId id) override;
  std::vector<SampledToken> execute(const Schedule& schedule) override;
  std::unordered_map<RequestId, std::vector<PromptLogprob>> take_prompt_logprobs() override;
  void idle_step() override;
  StepGraphStats graph_stats() const override { return model_.graph_stats(); }

  // The forward batch of a schedule (binds the PagedKv sequences as a side effect).
  ForwardBatch build_batch(const Schedule& schedule);

  Model& model() { return model_; }

 private:
  // The sample op's inputs of the step's sampling requests (runs on the host worker).
  void prepare_rows(const std::vector<SamplerState*>& states, SampleInputs& in) const;
  // Marks the batch's last slice (chunk c) for prompt scoring where its request asks for prompt_logprobs.
  void score_chunk(const ScheduledChunk& c, ForwardBatch& batch) const;
  // The step's scored prompt tokens, kept for take_prompt_logprobs.
  void keep_scores(const Schedule& schedule, const std::vector<TokenScore>& scores);

  // Runs f (the step on this runner's model) with the other ranks' steps beside it.
  template <typename F>
  auto on_every_rank(const ForwardBatch& batch, const Schedule& schedule, F&& f);

  const ModelConfig& cfg_;
  std::unique_ptr<ReplicaRanks> ranks_;  // null for one rank
  Model model_;
  PagedKv kv_;
  Sampler sampler_;
  std::unordered_map<RequestId, SamplerState> states_;
  std::unordered_map<RequestId, std::vector<int32_t>> scored_prompts_;         // requests with prompt_logprobs
  std::unordered_map<RequestId, std::vector<PromptLogprob>> prompt_logprobs_;  // scored, not yet taken
  HostWorker host_;  // last: its thread stops before the states it may touch go
};

}  // namespace dsv4
