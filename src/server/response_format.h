// How an endpoint turns choice updates into OpenAI JSON: streamed chunks, or one response gathered from
// every update. /v1/completions and /v1/chat/completions each implement it; the HTTP drivers
// (stream_session.h, and the non-streaming loop) are shared.
#pragma once

#include <string>
#include <vector>

#include "chat/completion_parser.h"
#include "server/api_error.h"
#include "server/choice.h"
#include "server/generation_job.h"

namespace dsv4::server {

// How an answer of the chat encoding is parsed and filtered (the formats of /v1/responses, /v1/messages).
struct AnswerOptions {
  chat::ThinkingMode thinking_mode = chat::ThinkingMode::kChat;  // how the generated text starts
  bool parallel_tool_calls = true;                               // false: the first tool call only
  bool keep_special_tokens = false;                              // skip_special_tokens false
};

class ResponseFormat {
 public:
  // `id_prefix`: "cmpl-" or "chatcmpl-" (the id gets 32 random hex digits); `chunk_object`: the "object" of
  // streamed chunks.
  ResponseFormat(std::string id_prefix, std::string chunk_object, std::string model, int64_t created);
  virtual ~ResponseFormat() = default;

  // Streaming: chunks sent before any token (chat: the assistant role), then the chunks of each update,
  // then (finish) those after the last one, before the stream ends.
  virtual void start(const GenerationJob& job, std::vector<Json>& chunks);
  virtual void stream(const Choice& c, const ChoiceUpdate& u, std::vector<Json>& chunks) = 0;
  virtual void finish(const GenerationJob& job, std::vector<Json>& chunks);
  // One chunk as a server-sent event ("data: {json}"), and whether the stream ends with "data: [DONE]".
  virtual std::string sse(const Json& chunk) const;
  virtual bool done_marker() const { return true; }
  // The event a stream ends with when the engine failed (the status line has gone): vLLM's {"error": ...}.
  virtual Json error_chunk(const ApiError& e) const;
  // Non-streaming: every update, then the whole response.
  virtual void collect(const Choice& c, const ChoiceUpdate& u) = 0;
  virtual Json response(const GenerationJob& job) = 0;

  // The last chunk of a stream with stream_options.include_usage: no choices, the usage.
  Json usage_chunk(const GenerationJob& job) const;

  const std::string& id() const { return id_; }
  const std::string& model() const { return model_; }
  // The client's request_id in place of the random part (vLLM's "chatcmpl-{request_id}").
  void use_request_id(const std::string& request_id) { id_ = id_prefix_ + request_id; }

 protected:
  // {"id", "object", "created", "model"} then `choices`.
  Json envelope(std::string_view object, Json choices) const;

 private:
  std::string id_prefix_, id_, chunk_object_, model_;
  int64_t created_;
};

Json usage_json(const Usage& u);

// An update's parser events: those its text completes and, when it ends the choice, what the parser held.
std::vector<chat::ParseEvent> parse_update(chat::CompletionParser& parser, const ChoiceUpdate& u);
// The parser of a chat-encoded answer that starts in `mode`.
chat::ParserOptions answer_parser_options(chat::ThinkingMode mode, bool keep_special_tokens);

// n random hex digits (ids: "chatcmpl-", "resp_", "msg_", ... followed by them).
std::string random_hex(size_t n);

}  // namespace dsv4::server
