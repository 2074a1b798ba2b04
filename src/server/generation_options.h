// The request fields both generation endpoints share (OpenAI's plus vLLM's extensions), parsed and
// validated into plain values. Sampling fields the request leaves out take the model's
// generation_config.json defaults (vLLM's generation_config="auto"), then the engine's.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/sampling_params.h"
#include "server/request_fields.h"

namespace dsv4::server {

// From the model folder's generation_config.json (absent file: all unset).
struct SamplingDefaults {
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k;
};

inline constexpr int64_t kMaxChoices = 128;  // n
inline constexpr size_t kMaxStopStrings = 64;
inline constexpr size_t kMaxBadWords = 128;  // bad_words strings (each may give two token sequences)

struct GenerationOptions {
  std::string model;  // empty when not given
  // Sampling (nullopt = not given).
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int64_t> top_k;
  double presence_penalty = 0, frequency_penalty = 0;
  std::optional<uint64_t> seed;
  std::unordered_map<int32_t, float> logit_bias;
  bool ignore_eos = false;
  int64_t min_tokens = 0;
  std::vector<int32_t> stop_token_ids;
  std::vector<int32_t> allowed_token_ids;           // empty: every id
  std::vector<std::string> bad_words;               // as given; bad_words_ids once tokenized
  std::vector<std::vector<int32_t>> bad_words_ids;  // server/bad_words.h
  // Prompt: truncate_prompt_tokens (-1: max_model_len) keeps the last N tokens, or the first N with
  // truncation_side "right".
  std::optional<int64_t> truncate_prompt_tokens;
  bool truncate_left = true;
  int64_t priority = 0;    // --scheduling-policy priority: lower runs earlier
  std::string request_id;  // the response id's suffix when given (vLLM)
  // Length and stops.
  std::optional<int64_t> max_tokens;  // >= 1 when given
  std::vector<std::string> stop;      // non-empty strings
  bool include_stop_str_in_output = false;
  std::optional<bool> skip_special_tokens;
  // Shape of the answer.
  int64_t n = 1;
  bool stream = false;
  bool include_usage = false;           // stream_options.include_usage
  bool continuous_usage_stats = false;  // stream_options.continuous_usage_stats (vLLM)
  int32_t logprobs = -1;                // -1 none, 0 the chosen token's, k > 0 also the top k
  int32_t prompt_logprobs = -1;         // vLLM's prompt_logprobs: -1 none, k >= 0 each prompt token and the top k
  bool return_token_ids = false;        // vLLM's: the prompt's and each choice's token ids in the answer
  bool tokens_as_ids = false;           // return_tokens_as_token_ids: logprob tokens as "token_id:N"
  std::string cache_salt;
  std::shared_ptr<const TokenConstraintFactory> constraint;  // structured output (structured_output.h)

  // The engine's parameters for choice `index` of `max_tokens` tokens (seed + index, as vLLM's n > 1).
  SamplingParams sampling(const SamplingDefaults& defaults, int64_t max_tokens, int64_t index) const;
};

// Everything but logprobs, whose shape differs between the endpoints. `max_tokens_keys` lists the names the
// length may come under, first given wins (chat: max_completion_tokens, max_tokens).
GenerationOptions parse_generation_options(const RequestFields& f,
                                           std::initializer_list<std::string_view> max_tokens_keys);

}  // namespace dsv4::server
