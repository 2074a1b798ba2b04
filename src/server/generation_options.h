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
  std::string cache_salt;

  // The engine's parameters for choice `index` of `max_tokens` tokens (seed + index, as vLLM's n > 1).
  SamplingParams sampling(const SamplingDefaults& defaults, int64_t max_tokens, int64_t index) const;
};

// Everything but logprobs, whose shape differs between the endpoints. `max_tokens_keys` lists the names the
// length may come under, first given wins (chat: max_completion_tokens, max_tokens).
GenerationOptions parse_generation_options(const RequestFields& f,
                                           std::initializer_list<std::string_view> max_tokens_keys);

// Refuses (400 "not supported") the fields this server understands but does not implement, so that none is
// silently ignored: beam search, best_of != n, prompt_logprobs, guided decoding, response_format other than
// text, and `extra` (endpoint-specific names).
void refuse_unsupported(const RequestFields& f);

}  // namespace dsv4::server
