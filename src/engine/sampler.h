// Sampler: one token from one row of logits, following vLLM's order: logit_bias and min_tokens masks,
// repetition then frequency/presence penalties, then greedy argmax, or temperature, min-p, top-k, top-p
// and a draw from the request's own generator (so a seeded request samples the same tokens alone or
// batched). Ids at or above the sampler's limit (the tokenizer's size) are never chosen.
// Log probabilities are those of the raw logits (vLLM's default), over the ids below the limit.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "engine/sampling_params.h"

namespace dsv4 {

struct TopLogprob {
  int32_t token = 0;
  float logprob = 0;
};

struct SampledToken {
  int32_t token = 0;
  bool has_logprobs = false;
  float logprob = 0;            // of the chosen token
  std::vector<TopLogprob> top;  // the most likely ids, most likely first (params.logprobs of them)
};

// What a request carries from one sample to the next.
struct SamplerState {
  SamplingParams params;
  std::mt19937_64 rng;
  std::unordered_set<int32_t> seen;             // prompt and output ids (repetition penalty)
  std::unordered_map<int32_t, int32_t> counts;  // output ids (presence and frequency penalties)
  int64_t num_output = 0;
};

class Sampler {
 public:
  // vocab: the logits' row length; limit: ids >= limit are never sampled (clamped to vocab);
  // eos: masked before min_tokens.
  Sampler(int64_t vocab, int64_t limit, int32_t eos);

  int64_t limit() const { return limit_; }
  // The state of a new request; `seed` is used when the params have none.
  SamplerState start(const SamplingParams& params, std::span<const int32_t> prompt, uint64_t seed) const;
  // Picks the next token from one row of `vocab` logits and records it in the state.
  SampledToken sample(std::span<const float> logits, SamplerState& state);
  // True when the next token is just the first maximum of the raw logits below the limit (greedy, no
  // bias, penalty, active min_tokens mask or logprobs): the argmax can then run where the logits are.
  bool plain_greedy(const SamplerState& state) const;
  // Records a token chosen that way, as sample() would have.
  SampledToken accept(int32_t token, SamplerState& state) const;

 private:
  void adjust(std::span<const float> logits, const SamplerState& s);
  int32_t argmax() const;
  int32_t draw(SamplerState& s);
  void keep_top_k(int64_t k);
  void keep_top_p(double p);
  void add_logprobs(std::span<const float> logits, int32_t n, SampledToken& out);

  int64_t vocab_, limit_;
  int32_t eos_;
  std::vector<double> z_;       // adjusted logits of the ids below the limit
  std::vector<int32_t> cand_;   // surviving candidates
  std::vector<double> weight_;  // exp(z / T - max) per id
};

}  // namespace dsv4
