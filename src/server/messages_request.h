// POST /v1/messages (Anthropic's Messages API, as DeepSeek's own API and llama.cpp serve it, so that
// Claude Code and the anthropic SDK can drive the model): a request becomes the chat request it stands for,
// encoded, constrained and sampled exactly as /v1/chat/completions would.
//
// Translation:
//  - `system` (a string or text blocks) is a leading system message; `messages` alternate user and
//    assistant turns whose content is a string or blocks: text, tool_use (an assistant's tool call, its
//    `input` object as the arguments), tool_result (a tool message before the user's text, its content a
//    string or text blocks) and thinking (the assistant turn's reasoning_content).
//  - tools ({"name", "description", "input_schema"}) become function tools; tool_choice auto / any / tool /
//    none becomes auto / required / a named function / none, disable_parallel_tool_use parallel_tool_calls
//    false; thinking {"type": "enabled", "budget_tokens"} turns thinking on, its budget capping the
//    reasoning (thinking_budget.h); stop_sequences becomes stop, metadata.user_id user; max_tokens is
//    required.
//  - Other fields pass through to the chat request (seed and vLLM's extensions).
//  - Refused with a 400 naming the field: image and document blocks (a text-only model), server tools
//    (web search, code execution, ...), mcp_servers, container.
#pragma once

#include "server/chat_request.h"

namespace dsv4::server {

ChatRequest parse_messages_request(const Json& body);

// The chat request body a Messages body stands for (before the chat parser's checks).
Json chat_body_of_messages(const Json& body);

}  // namespace dsv4::server
