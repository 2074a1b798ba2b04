// /v1/responses answers: the generated text, parsed by the V4 completion parser as for chat, becomes the
// Responses API's output items: a reasoning item (reasoning_text content), a message (output_text) and a
// function_call item per DSML tool call, in the order they were generated. Non-streaming: one response
// object. Streaming: named server-sent events (`event: response.output_text.delta` ...), each with its
// sequence_number: response.created and response.in_progress first, each item's added / part / delta /
// done events as it forms, then response.completed (response.incomplete when max_output_tokens ended it)
// with the whole object; no "data: [DONE]" (OpenAI sends none).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/response_format.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

struct ResponsesFormatOptions : AnswerOptions {
  bool logprobs = false;  // the output text's token logprobs (include "message.output_text.logprobs")
  int top_logprobs = 0;
  bool tokens_as_ids = false;
};

class ResponsesFormat final : public ResponseFormat {
 public:
  // `echo`: the request's settings the object repeats (ResponsesRequest::echo).
  ResponsesFormat(std::string model, int64_t created, const Tokenizer& tok, ResponsesFormatOptions options, Json echo);

  void start(const GenerationJob& job, std::vector<Json>& chunks) override;
  void stream(const Choice& c, const ChoiceUpdate& u, std::vector<Json>& chunks) override;
  void finish(const GenerationJob& job, std::vector<Json>& chunks) override;
  void collect(const Choice& c, const ChoiceUpdate& u) override;
  Json response(const GenerationJob& job) override;
  std::string sse(const Json& chunk) const override;
  bool done_marker() const override { return false; }

 private:
  enum class Open { kNone, kReasoning, kMessage };
  // Feeds an update's parser events; events go to `out` (null: not streaming).
  void feed(const Choice& c, const ChoiceUpdate& u, std::vector<Json>* out);
  void on_event(const chat::ParseEvent& e, std::vector<Json>* out);
  void text_delta(Open kind, const std::string& text, std::vector<Json>* out);
  void open_text(Open kind, std::vector<Json>* out);
  void close_text(std::vector<Json>* out);
  void add_tool_call(const chat::ToolCall& call, std::vector<Json>* out);
  void emit(std::vector<Json>* out, Json event);
  Json object(const GenerationJob& job, const std::string& status) const;
  std::string status() const;

  const Tokenizer& tok_;
  ResponsesFormatOptions options_;
  Json echo_;
  chat::CompletionParser parser_;
  Json items_ = Json::array();  // the output items closed so far
  Open open_ = Open::kNone;     // the text item being written, if any
  std::string open_id_, open_text_;
  Json open_logprobs_ = Json::array();     // the open message's token logprobs
  Json pending_logprobs_ = Json::array();  // tokens' logprobs not yet sent with an output_text delta
  // usage's reasoning_tokens: the generated tokens up to and with "</think>" while thinking (all of them
  // if it never came), counted from the engine's tokens, not the text (special tokens leave no text).
  bool thinking_ = false;
  std::optional<int32_t> end_think_;
  int64_t reasoning_tokens_ = 0;
  int tool_calls_ = 0;
  std::string finish_reason_;
  int64_t sequence_ = 0;
};

}  // namespace dsv4::server
