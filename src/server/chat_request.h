// POST /v1/chat/completions, parsed into the messages for the V4 encoder and the generation options.
//
// Decisions (docs/server.md):
//  - Thinking is off unless the request asks: chat_template_kwargs.thinking (or enable_thinking), DeepSeek's
//    {"thinking": {"type": "enabled"}}, or a reasoning_effort other than "none". Effort "max" selects the
//    encoder's maximum-effort preamble; the others render as the official default. The thinking object's
//    "budget_tokens" (Anthropic's field) caps the reasoning: past it "</think>" is forced.
//  - Request-level tools go on the leading system (or developer) message, or on a new empty system message
//    put first, as the official encoder expects; tool_choice "none" leaves them out of the prompt;
//    "required" and a named function constrain the output to a DSML call (forced_tool_call.h).
//  - Assistant messages may carry `reasoning` (vLLM's name) instead of `reasoning_content`.
//  - A chat ending with an assistant turn continues it (chat/assistant_prefill.h) when asked to, by
//    continue_final_message or DeepSeek's `"prefix": true` on that message; otherwise it is refused (the
//    V4 encoding has no way to start another assistant turn after a closed one). add_generation_prompt
//    false ends the prompt with the user's turn. Both true at once is refused, as in vLLM.
//  - include_reasoning false leaves the reasoning out of the answer; parallel_tool_calls false keeps
//    only the first tool call.
//  - The fields refused or accepted without effect are server/unsupported_fields.h's.
#pragma once

#include "chat/encoding.h"
#include "server/generation_options.h"
#include "server/structured_output_request.h"
#include "server/unsupported_fields.h"

namespace dsv4::server {

struct ChatRequest {
  GenerationOptions options;
  Json messages;  // with the request's tools attached
  chat::EncodeOptions encode;
  bool continue_final = false;  // the last (assistant) message is continued
  bool logprobs = false;
  int top_logprobs = 0;
  bool include_reasoning = true;
  bool parallel_tool_calls = true;
  StructuredOutputRequest structured;
  ToolChoice tool_choice;
  Json tools = Json::array();    // for tool_choice required or named (the constrained call)
  int64_t thinking_budget = -1;  // thinking.budget_tokens: reasoning tokens at most (-1: no limit)
};

ChatRequest parse_chat_request(const Json& body);

// The thinking mode and effort a request asks for (see above).
chat::EncodeOptions thinking_options(const RequestFields& f);

}  // namespace dsv4::server
