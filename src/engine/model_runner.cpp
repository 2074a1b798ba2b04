#include "engine/model_runner.h"

#include <utility>

#include "core/error.h"

namespace dsv4 {

ModelRunner::ModelRunner(const ModelConfig& cfg, const ModelWeights& weights, KvCacheManager& manager, KvDTypes dtypes,
                         Backend& backend, int64_t vocab_limit)
    : ModelRunner(cfg, weights, manager, dtypes, backend, vocab_limit, plan_parallel(cfg, {}), 0) {}

ModelRunner::ModelRunner(const ModelConfig& cfg, const ModelWeights& weights, KvCacheManager& manager, KvDTypes dtypes,
                         Backend& backend, int64_t vocab_limit, const ParallelLayout& layout, int rank_threads,
                         ReplicaPlace place)
    : cfg_(cfg),
      ranks_(layout.config.world() > 1 ? std::make_unique<ReplicaRanks>(cfg, weights, manager, kv_formats(dtypes),
                                                                        layout, std::move(place), backend, rank_threads)
                                       : nullptr),
      model_(cfg, weights, *backend.ops, *backend.device,
             ranks_ ? ranks_->first_shard() : ModelShard{plan_parallel(cfg, {})}),
      kv_(cfg, manager, kv_formats(dtypes)),
      sampler_(cfg.vocab_size, vocab_limit, static_cast<int32_t>(cfg.eos_token_id)) {
  if (ranks_) ranks_->mirror_host_tier(manager);
}

template <typename F>
auto ModelRunner::on_every_rank(const ForwardBatch& batch, const Schedule& schedule, F&& f) {
  if (!ranks_) return f();
  std::vector<KvRequestId> requests;
  for (const ScheduledChunk& c : schedule.chunks) requests.push_back(c.id);
  decltype(f()) out;
  ranks_->step(batch, requests, [&] { out = f(); });
  return out;
}

ModelRunner::~ModelRunner() = default;

void ModelRunner::idle_step() {
  if (ranks_) ranks_->idle([&] { model_.idle_step(); });
}

void ModelRunner::add_request(RequestId id, const SamplingParams& params, std::span<const int32_t> prompt,
                              uint64_t seed) {
  states_.insert_or_assign(id, sampler_.start(params, prompt, seed));
  if (params.prompt_logprobs >= 0)
    scored_prompts_.insert_or_assign(id, std::vector<int32_t>(prompt.begin(), prompt.end()));
}

void ModelRunner::remove_request(RequestId id) {
  states_.erase(id);
  scored_prompts_.erase(id);
  prompt_logprobs_.erase(id);
}

// A chunk inside its prompt scores its tokens' successors: its own next tokens, and the prompt's token
// after it unless the chunk ends the prompt (that row samples).
void ModelRunner::score_chunk(const ScheduledChunk& c, ForwardBatch& batch) const {
  const auto it = scored_prompts_.find(c.id);
  if (it == scored_prompts_.end()) return;
  const std::vector<int32_t>& prompt = it->second;
  const auto end = static_cast<size_t>(c.start) + c.tokens.size();
  if (static_cast<size_t>(c.start) >= prompt.size()) return;
  batch.score_last(states_.at(c.id).params.prompt_logprobs, end < prompt.size() ? prompt[end] : -1);
  batch.score_limit = sampler_.limit();
}

void ModelRunner::keep_scores(const Schedule& schedule, const std::vector<TokenScore>& scores) {
  for (const TokenScore& t : scores) {
    const RequestId id = schedule.chunks[static_cast<size_t>(t.seq)].id;
    PromptLogprob p{t.position, t.token, static_cast<float>(t.logprob), t.rank, {}};
    for (size_t j = 0; j < t.top_id.size() && t.top_id[j] >= 0; ++j)
      p.top.push_back({t.top_id[j], static_cast<float>(t.top_logprob[j])});
    prompt_logprobs_[id].push_back(std::move(p));
  }
}

std::unordered_map<RequestId, std::vector<PromptLogprob>> ModelRunner::take_prompt_logprobs() {
  return std::exchange(prompt_logprobs_, {});
}

void ModelRunner::prepare_rows(const std::vector<SamplerState*>& states, SampleInputs& in) const {
  for (SamplerState* s : states) sampler_.prepare(*s, in);
}

ForwardBatch ModelRunner::build_batch(const Schedule& schedule) {
  ForwardBatch batch;
  for (size_t i = 0; i < schedule.chunks.size(); ++i) {
    const ScheduledChunk& c = schedule.chunks[i];
    const auto seq = static_cast<int32_t>(i);
    kv_.bind(seq, c.id);
    batch.add(seq, c.start, c.tokens.data(), static_cast<int64_t>(c.tokens.size()), c.sample);
    score_chunk(c, batch);
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
  if (greedy && !batch.scores()) {  // the argmax runs where the logits are: one id per request comes back
    const std::vector<int32_t> ids =
        on_every_rank(batch, schedule, [&] { return model_.forward_greedy(batch, kv_, sampler_.limit()); });
    DSV4_CHECK(ids.size() == states.size(), "model runner: the model returned {} ids for {} requests", ids.size(),
               states.size());
    for (size_t i = 0; i < ids.size(); ++i) out.push_back(sampler_.accept(ids[i], *states[i]));
    return out;
  }
  // Anything else runs the sample op where the logits are: the host turns each request's history into a
  // row, edits and allow-set, and a token, a logprob and the top ids per request come back. The rows are
  // made on the host worker while the forward runs: a grammar's mask is off the step's critical path.
  SampleInputs in;
  const StepLogits logits =
      host_.beside([&] { prepare_rows(states, in); },
                   [&] { return on_every_rank(batch, schedule, [&] { return model_.step(batch, kv_); }); });
  keep_scores(schedule, logits.scores);
  const SampleResult r = model_.sample(logits, sampler_.limit(), in);
  DSV4_CHECK(r.token.size() == states.size(), "model runner: the model returned {} tokens for {} requests",
             r.token.size(), states.size());
  const auto w = static_cast<size_t>(r.top_width);
  for (size_t i = 0; i < states.size(); ++i) {
    const auto top_id = std::span<const int32_t>(r.top_id).subspan(i * w, w);
    const auto top_logprob = std::span<const double>(r.top_logprob).subspan(i * w, w);
    out.push_back(sampler_.finish(*states[i], in.rows[i], r.token[i], r.logprob.empty() ? 0.0 : r.logprob[i], top_id,
                                  top_logprob));
  }
  return out;
}

}  // namespace dsv4
