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
  const std::vector<float> logits = model_.forward(batch, kv_);
  const auto V = static_cast<size_t>(cfg_.vocab_size);
  size_t row = 0;
  for (const ScheduledChunk& c : schedule.chunks) {
    if (!c.sample) continue;
    const auto it = states_.find(c.id);
    DSV4_CHECK(it != states_.end(), "model runner: request {} has no sampler state", c.id);
    DSV4_CHECK((row + 1) * V <= logits.size(), "model runner: the model returned {} logit rows, wanted more",
               logits.size() / V);
    out.push_back(sampler_.sample(std::span<const float>(logits).subspan(row * V, V), it->second));
    ++row;
  }
  return out;
}

}  // namespace dsv4
