// truncate_prompt_tokens (vLLM): a prompt longer than N tokens keeps its last N (truncation_side "left",
// the default) or its first N ("right"); -1 means N = max_model_len. Applied to the token ids the
// request's prompt became (chat: the encoded conversation), before the length checks.
#pragma once

#include <cstdint>
#include <vector>

#include "server/generation_options.h"

namespace dsv4::server {

// Throws ApiError 400 (param truncate_prompt_tokens) for an N above max_model_len, as vLLM does.
void truncate_prompts(std::vector<std::vector<int32_t>>& prompts, const GenerationOptions& o, int64_t max_model_len);

}  // namespace dsv4::server
