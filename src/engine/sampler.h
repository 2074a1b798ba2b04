// Sampler: one token from one row of logits, following vLLM's order: logit_bias and the token mask
// (min_tokens, bad_words, allowed_token_ids, a structured-output constraint: token_mask()), repetition then
// frequency/presence penalties, then greedy argmax, or temperature, min-p, top-k, top-p and a draw from the request's
// own generator (so a seeded request samples the same tokens alone or batched). Ids at or above the sampler's limit
// (the tokenizer's size) are never chosen. Log probabilities are those of the raw logits (vLLM's default), over the ids
// below the limit. A constrained request (SamplingParams::constraint) samples only the ids its constraint allows, with
// the other masks intersected; should every allowed logit be −inf (min_tokens holding back the EOS that is all a
// finished grammar allows), the constraint's lowest id is taken, so a grammar is never left. The history (generator,
// seen ids, counts) stays here; the math on the logits is the backend's sample op (backend/ops.h), fed by prepare() and
// read back by finish(), or run on the host by sample().
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/sample_row.h"
#include "engine/sampling_params.h"
#include "engine/token_mask.h"

namespace dsv4 {

struct TopLogprob {
  int32_t token = 0;
  float logprob = 0;
};

// A prompt token scored (SamplingParams::prompt_logprobs): its raw logprob given the tokens before it, its
// rank among the vocabulary (1: the most likely id) and the most likely ids there.
struct PromptLogprob {
  int64_t position = 0;  // in the prompt, from 1 (the first token has none)
  int32_t token = 0;
  float logprob = 0;
  int64_t rank = 0;
  std::vector<TopLogprob> top;
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
  std::vector<uint32_t> allowed;  // the allow-set of params.allowed_token_ids (empty: none given)
  std::vector<int32_t> tail;      // the last output ids, as many as the longest bad word needs
  size_t tail_len = 0;
  std::unique_ptr<TokenConstraint> constraint;  // params.constraint's, for this sequence; null: none
  std::vector<uint32_t> allow_buffer;           // the allow-sets' intersection, when a row has several
};

class Sampler {
 public:
  // vocab: the logits' row length; limit: ids >= limit are never sampled (clamped to vocab);
  // eos: masked before min_tokens.
  Sampler(int64_t vocab, int64_t limit, int32_t eos);

  int64_t limit() const { return limit_; }
  // The state of a new request; `seed` is used when the params have none.
  SamplerState start(const SamplingParams& params, std::span<const int32_t> prompt, uint64_t seed) const;
  // Picks the next token from one row of `vocab` logits on the host (the CPU sample op's math) and
  // records it in the state.
  SampledToken sample(std::span<const float> logits, SamplerState& state);
  // True when the next token is just the first maximum of the raw logits below the limit (greedy, no
  // bias, penalty, token mask or logprobs): the argmax can then run where the logits are.
  bool plain_greedy(const SamplerState& state) const;
  // Every constraint on the request's next token (see TokenMask): the one place masks are decided.
  TokenMask token_mask(const SamplerState& state) const;
  // Records a token chosen that way, as sample() would have.
  SampledToken accept(int32_t token, SamplerState& state) const;

  // The sample op's inputs for a request's next token (backend/ops.h SampleParams), appended to `in`:
  // the row, with the uniform drawn from the state's generator whenever the row samples (so the
  // generator's stream does not depend on the logits), its edits (ids ascending) and its allow-set (a
  // pointer to where it lies, valid until the row's token is recorded). Touches only `state` and `in`:
  // it may run on another thread than the one that runs the step (ModelRunner overlaps them).
  const SampleRow& prepare(SamplerState& state, SampleInputs& in) const;
  // Records the op's choice for a row made by prepare(); top_id/top_logprob hold the row's top entries.
  SampledToken finish(SamplerState& state, const SampleRow& row, int32_t token, double logprob,
                      std::span<const int32_t> top_id, std::span<const double> top_logprob) const;

 private:
  void record(int32_t token, SamplerState& s) const;
  // The token moved past in the state's constraint: the chosen one, or (when the op fell back to an
  // id the constraint refuses because every allowed logit was −inf) the constraint's lowest id.
  int32_t constrain(int32_t token, SamplerState& s) const;

  int64_t vocab_, limit_;
  int32_t eos_;
  SampleScratch scratch_;
  SampleInputs inputs_;
  std::vector<int32_t> top_id_;
  std::vector<double> top_logprob_;
};

}  // namespace dsv4
