// Executor: what runs a step for the engine. The ModelRunner is the real one; tests substitute their own
// (a fault-injecting or model-free executor) through Engine's executor factory.
#pragma once

#include <span>
#include <unordered_map>
#include <vector>

#include "engine/sampler.h"
#include "engine/sampling_params.h"
#include "model/step_shape.h"
#include "sched/schedule.h"

namespace dsv4 {

class Executor {
 public:
  virtual ~Executor() = default;
  // A request starts (its sampler state lives here until remove_request). `seed` is used when the
  // params have none.
  virtual void add_request(RequestId id, const SamplingParams& params, std::span<const int32_t> prompt,
                           uint64_t seed) = 0;
  virtual void remove_request(RequestId id) = 0;
  // Runs the step; returns one token per chunk with sample = true, in chunk order. Throws on failure.
  virtual std::vector<SampledToken> execute(const Schedule& schedule) = 0;
  // The prompt tokens the steps since the last call scored, by request, in position order (requests with
  // prompt_logprobs). None for executors without a model.
  virtual std::unordered_map<RequestId, std::vector<PromptLogprob>> take_prompt_logprobs() { return {}; }
  // A step with nothing scheduled, run while the other data-parallel replicas step (engine/step_lockstep.h):
  // the model's collectives that span replicas (the expert exchange) meet. Nothing to do by default.
  virtual void idle_step() {}
  // Decode steps recorded and replayed so far (CUDA graphs); none for executors without a model.
  virtual StepGraphStats graph_stats() const { return {}; }
};

}  // namespace dsv4
