#include "engine/sampling_params.h"

#include <cmath>

#include "core/error.h"

namespace dsv4 {

void SamplingParams::validate(int64_t vocab) const {
  DSV4_CHECK(std::isfinite(temperature) && temperature >= 0, "temperature must be >= 0, got {}", temperature);
  DSV4_CHECK(top_k >= -1, "top_k must be -1, 0 or positive, got {}", top_k);
  DSV4_CHECK(top_p > 0 && top_p <= 1, "top_p must be in (0, 1], got {}", top_p);
  DSV4_CHECK(min_p >= 0 && min_p <= 1, "min_p must be in [0, 1], got {}", min_p);
  DSV4_CHECK(std::isfinite(repetition_penalty) && repetition_penalty > 0, "repetition_penalty must be > 0, got {}",
             repetition_penalty);
  DSV4_CHECK(presence_penalty >= -2 && presence_penalty <= 2, "presence_penalty must be in [-2, 2], got {}",
             presence_penalty);
  DSV4_CHECK(frequency_penalty >= -2 && frequency_penalty <= 2, "frequency_penalty must be in [-2, 2], got {}",
             frequency_penalty);
  DSV4_CHECK(max_tokens >= 1, "max_tokens must be at least 1, got {}", max_tokens);
  DSV4_CHECK(min_tokens >= 0 && min_tokens <= max_tokens, "min_tokens must be in [0, max_tokens = {}], got {}",
             max_tokens, min_tokens);
  DSV4_CHECK(logprobs >= -1 && logprobs <= kMaxLogprobs, "logprobs must be in [-1, {}], got {}", kMaxLogprobs,
             logprobs);
  DSV4_CHECK(prompt_logprobs >= -1 && prompt_logprobs <= kMaxLogprobs, "prompt_logprobs must be in [-1, {}], got {}",
             kMaxLogprobs, prompt_logprobs);
  for (const auto& [id, bias] : logit_bias) {
    DSV4_CHECK(id >= 0 && id < vocab, "logit_bias: token id {} is outside the vocabulary [0, {})", id, vocab);
    DSV4_CHECK(std::isfinite(bias), "logit_bias: the bias of token {} is not finite", id);
  }
  for (int32_t id : stop_token_ids) {
    DSV4_CHECK(id >= 0 && id < vocab, "stop_token_ids: token id {} is outside the vocabulary [0, {})", id, vocab);
  }
  for (int32_t id : allowed_token_ids) {
    DSV4_CHECK(id >= 0 && id < vocab, "allowed_token_ids: token id {} is outside the vocabulary [0, {})", id, vocab);
  }
  for (const auto& word : bad_words) {
    DSV4_CHECK(!word.empty(), "bad_words: a word has no tokens");
    for (int32_t id : word) {
      DSV4_CHECK(id >= 0 && id < vocab, "bad_words: token id {} is outside the vocabulary [0, {})", id, vocab);
    }
  }
}

}  // namespace dsv4
