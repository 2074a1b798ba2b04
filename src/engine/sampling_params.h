// SamplingParams: how one request picks its tokens and when it stops (the OpenAI / vLLM request fields).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/token_constraint.h"

namespace dsv4 {

struct SamplingParams {
  double temperature = 1.0;         // 0 = greedy (argmax; ties go to the lowest id)
  int64_t top_k = 0;                // 0 or -1 = all
  double top_p = 1.0;               // (0, 1]
  double min_p = 0.0;               // [0, 1]: drop tokens below min_p x the most likely one's probability
  std::optional<uint64_t> seed;     // same seed, same prompt, same params -> same tokens
  double repetition_penalty = 1.0;  // > 0; on prompt and output tokens (logit / p if positive, x p if not)
  double presence_penalty = 0.0;    // [-2, 2]; on output tokens
  double frequency_penalty = 0.0;   // [-2, 2]; per occurrence in the output
  std::unordered_map<int32_t, float> logit_bias;  // added to the logits of these ids
  bool ignore_eos = false;
  int64_t min_tokens = 0;  // EOS and stop ids cannot be sampled before this many tokens
  std::vector<int32_t> stop_token_ids;
  // Only these ids may be sampled (vLLM's allowed_token_ids); empty: every id.
  std::vector<int32_t> allowed_token_ids;
  // Token sequences never to generate (vLLM's bad_words, tokenized): the last id of each is masked
  // whenever the output so far ends with the ids before it (a one-id word always).
  std::vector<std::vector<int32_t>> bad_words;
  int64_t max_tokens = 16;
  // Log probabilities of the model's raw distribution (before penalties, bias and temperature):
  // -1 = none, 0 = the chosen token's, n > 0 = also the n most likely.
  int32_t logprobs = -1;
  // The prompt's tokens scored (vLLM's prompt_logprobs): -1 = not, n >= 0 = each prompt token after the
  // first with its raw logprob, its rank and the n most likely ids. The prompt is then computed whole:
  // no prefix-cache hit stands in for its positions.
  int32_t prompt_logprobs = -1;
  // Structured output: which ids may come next (null: any). min_tokens still holds EOS and the stop ids
  // back, unless the constraint allows nothing else.
  std::shared_ptr<const TokenConstraintFactory> constraint;

  bool greedy() const { return temperature < 1e-5; }
  // Throws dsv4::Error naming the first bad field. `vocab` bounds logit_bias, stop, allowed and bad-word ids.
  void validate(int64_t vocab) const;
};

inline constexpr int32_t kMaxLogprobs = 20;

}  // namespace dsv4
