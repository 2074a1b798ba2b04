#include "engine/model_runner.h"

#include "core/error.h"

namespace dsv4 {

ModelRunner::ModelRunner(const ModelConfig& cfg, const ModelWeights& weights, KvCacheManager& manager, KvDTypes dtypes,
                         Backend& backend, int64_t vocab_limit)
    : cfg_(cfg),
      model_(cfg, weights, *backend.ops, *backend.device),
      kv_(cfg, manager, kv_formats(dtypes)),
      sampler_(cfg.vocab_size, vocab_limit, static_cast<int32_t>(cfg.eos_token_id)) {}

ModelRunner::~ModelRunner() = default;

void ModelRunner::add_request(RequestId id, const SamplingParams& params, std::span<const int32_t> prompt,
                              uint64_t seed) {
  states_.insert_or_assign(id, sampler_.start(params, prompt, seed));
}

void ModelRunner::remove_request(RequestId id) { states_.erase(id); }

ForwardBatch ModelRunner::build_batch(const Schedule& schedule) {
  ForwardBatch batch;
  for (size_t i = 0; i < schedule.chunks.size(); ++i) {
    const ScheduledChunk& c = schedule.chunks[i];
    const auto seq = static_cast<int32_t>(i);
    kv_.bind(seq, c.id);
    batch.add(seq, c.start, c.tokens.data(), static_cast<int64_t>(c.tokens.size()), c.sample);
  }
  return batch;
}

std::vector<SampledToken> ModelRunner::execute(const Schedule& schedule) {
  std::vector<SampledToken> out;
  if (schedule.empty()) return out;
  const ForwardBatch batch = build_batch(schedule);
  std::vector<SamplerState*> states;
  bool greedy = true;
  for (const ScheduledChunk& c : schedule.chunks) {
    if (!c.sample) continue;
    const auto it = states_.find(c.id);
    DSV4_CHECK(it != states_.end(), "model runner: request {} has no sampler state", c.id);
    states.push_back(&it->second);
    greedy = greedy && sampler_.plain_greedy(it->second);
  }
  if (greedy) {  // the argmax runs where the logits are: one id per request comes back
    const std::vector<int32_t> ids = model_.forward_greedy(batch, kv_, sampler_.limit());
    DSV4_CHECK(ids.size() == states.size(), "model runner: the model returned {} ids for {} requests", ids.size(),
               states.size());
    for (size_t i = 0; i < ids.size(); ++i) out.push_back(sampler_.accept(ids[i], *states[i]));
    return out;
  }
  const std::vector<float> logits = model_.forward(batch, kv_);
  const auto V = static_cast<size_t>(cfg_.vocab_size);
  DSV4_CHECK(logits.size() == states.size() * V, "model runner: the model returned {} logit rows for {} requests",
             logits.size() / V, states.size());
  for (size_t i = 0; i < states.size(); ++i)
    out.push_back(sampler_.sample(std::span<const float>(logits).subspan(i * V, V), *states[i]));
  return out;
}

}  // namespace dsv4
