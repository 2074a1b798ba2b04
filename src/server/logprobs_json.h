// Log probabilities in the two OpenAI shapes. Chat: {"content": [{"token", "logprob", "bytes",
// "top_logprobs": [...]}]}. Completions (legacy): {"tokens", "token_logprobs", "top_logprobs": [{token:
// logprob}], "text_offset"}. Token strings are the token's own decoded text (a partial UTF-8 character
// shows as U+FFFD; `bytes` has the exact bytes), or "token_id:N" with return_tokens_as_token_ids (vLLM's
// way to name tokens whose text is not valid UTF-8; `bytes` and text offsets stay the text's). -inf is
// written as -9999.0, as vLLM does.
#pragma once

#include <cstdint>
#include <span>

#include "engine/request_stream.h"
#include "server/request_fields.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

// The entries of "content" for `ids` (top_n alternatives each).
Json chat_logprobs_content(const Tokenizer& tok, std::span<const int32_t> ids, std::span<const TokenLogprobs> lps,
                           int top_n, bool tokens_as_ids = false);

// vLLM's prompt_logprobs of a prompt of `prompt_len` tokens: null for the first, then for each scored token
// {"<id>": {"logprob", "rank", "decoded_token"}} holding the token itself (its rank in the vocabulary) and
// its top_n most likely alternatives (ranks 1..top_n).
Json prompt_logprobs_json(const Tokenizer& tok, std::span<const PromptLogprob> scored, int top_n, bool tokens_as_ids);

// The prompt's tokens (echo) into a completions logprobs object, before the generated ones: the first with a
// null logprob and null alternatives, the others as scored.
void append_prompt_completion_logprobs(Json& obj, const Tokenizer& tok, std::span<const int32_t> prompt,
                                       std::span<const PromptLogprob> scored, int top_n, int64_t& text_offset,
                                       bool tokens_as_ids = false);

// A completions logprobs object without tokens.
Json empty_completion_logprobs();

// Appends `ids` to a completions logprobs object (created on first use); `text_offset` is the running
// character offset of the choice's text and advances by each token's text.
void append_completion_logprobs(Json& obj, const Tokenizer& tok, std::span<const int32_t> ids,
                                std::span<const TokenLogprobs> lps, int top_n, int64_t& text_offset,
                                bool tokens_as_ids = false);

}  // namespace dsv4::server
