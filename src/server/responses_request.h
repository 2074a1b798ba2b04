// POST /v1/responses (OpenAI's Responses API), stateless as vLLM's is without a response store: a
// request becomes the chat request it stands for, so that it is encoded, constrained and sampled exactly
// as /v1/chat/completions would (the same prompt tokens, the same answer for the same seed).
//
// Translation:
//  - `instructions` is a leading system message; `input` is a user message (a string) or a list of items:
//    messages (user, system, developer, assistant; string content or input_text / output_text parts),
//    function_call items (tool calls of the assistant turn they follow), function_call_output items (tool
//    messages) and reasoning items (the reasoning_content of the assistant turn after them).
//  - function tools ({"type": "function", "name", "parameters", ...}) and tool_choice (a string, or
//    {"type": "function", "name"}) become the chat ones; text.format (json_object, json_schema) becomes
//    response_format; reasoning.effort becomes reasoning_effort; max_output_tokens becomes max_tokens.
//  - Other fields pass through to the chat request (seed, top_k, stop, ... as vLLM extensions).
//  - Refused with a 400 naming the field: previous_response_id, conversation and item_reference (there is
//    no store: send the whole conversation as input), background, prompt templates, non-function tools,
//    image / file / audio parts (a text-only model), n other than 1, truncation "auto".
//  - include "message.output_text.logprobs" (or top_logprobs) asks for the output text's logprobs.
#pragma once

#include "server/chat_request.h"

namespace dsv4::server {

struct ResponsesRequest {
  ChatRequest chat;
  // What the response object repeats of the request: instructions, max_output_tokens, tools, tool_choice,
  // text, reasoning, metadata, temperature, top_p, parallel_tool_calls, user.
  Json echo = Json::object();
};

ResponsesRequest parse_responses_request(const Json& body);

// The chat request body a Responses body stands for (before the chat parser's checks).
Json chat_body_of_responses(const Json& body);

}  // namespace dsv4::server
