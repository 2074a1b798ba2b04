#include "engine/stop_check.h"

#include <algorithm>

namespace dsv4 {

std::optional<StopDecision> check_stop(const SamplingParams& p, int32_t token, int64_t num_output, int64_t num_tokens,
                                       int64_t max_model_len, int32_t eos) {
  if (num_output >= p.min_tokens) {
    if (!p.ignore_eos && token == eos) return StopDecision{FinishReason::kStop, token};
    if (std::find(p.stop_token_ids.begin(), p.stop_token_ids.end(), token) != p.stop_token_ids.end()) {
      return StopDecision{FinishReason::kStop, token};
    }
  }
  if (num_output >= p.max_tokens || num_tokens >= max_model_len) return StopDecision{FinishReason::kLength, -1};
  return std::nullopt;
}

}  // namespace dsv4
