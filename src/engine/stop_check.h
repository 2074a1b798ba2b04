// When a request stops, checked after each sampled token (vLLM's order: min_tokens first, then EOS,
// stop ids, then the length limits).
#pragma once

#include <cstdint>
#include <optional>

#include "engine/request_stream.h"
#include "engine/sampling_params.h"

namespace dsv4 {

struct StopDecision {
  FinishReason reason = FinishReason::kStop;
  int32_t stop_token_id = -1;  // kStop: the id that stopped it
};

// `num_output` counts the new token; `num_tokens` is prompt plus output.
std::optional<StopDecision> check_stop(const SamplingParams& p, int32_t token, int64_t num_output, int64_t num_tokens,
                                       int64_t max_model_len, int32_t eos);

}  // namespace dsv4
