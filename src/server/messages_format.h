// /v1/messages answers in Anthropic's shape: the generated text, parsed by the V4 completion parser as for
// chat, becomes content blocks in the order generated: thinking, text, and a tool_use block per DSML tool
// call (its arguments as the `input` object). stop_reason: max_tokens when the limit ended it, tool_use
// when it called a tool, stop_sequence (with the sequence) for a stop string, else end_turn. A stream
// sends named events: message_start, per block content_block_start / content_block_delta (text_delta,
// thinking_delta, input_json_delta) / content_block_stop, then message_delta (stop_reason, usage) and
// message_stop.
#pragma once

#include <string>
#include <vector>

#include "server/response_format.h"

namespace dsv4::server {

class MessagesFormat final : public ResponseFormat {
 public:
  MessagesFormat(std::string model, int64_t created, AnswerOptions options);

  void start(const GenerationJob& job, std::vector<Json>& chunks) override;
  void stream(const Choice& c, const ChoiceUpdate& u, std::vector<Json>& chunks) override;
  void finish(const GenerationJob& job, std::vector<Json>& chunks) override;
  void collect(const Choice& c, const ChoiceUpdate& u) override;
  Json response(const GenerationJob& job) override;
  std::string sse(const Json& chunk) const override;
  bool done_marker() const override { return false; }
  Json error_chunk(const ApiError& e) const override;

 private:
  enum class Open { kNone, kThinking, kText };
  void feed(const Choice& c, const ChoiceUpdate& u, std::vector<Json>* out);
  void on_event(const chat::ParseEvent& e, std::vector<Json>* out);
  void close_block(std::vector<Json>* out);
  void emit(std::vector<Json>* out, Json event) const;
  Json usage(const GenerationJob& job) const;

  AnswerOptions options_;
  chat::CompletionParser parser_;
  Json blocks_ = Json::array();  // the content blocks closed so far
  Open open_ = Open::kNone;      // the text or thinking block being written, if any
  std::string open_text_;
  bool tool_use_ = false;
  std::string stop_reason_;
  Json stop_sequence_;
};

// An error in Anthropic's envelope, {"type": "error", "error": {"type", "message"}}, from the server's
// ({"error": {"message", "type", "param", "code"}}: those fields stay inside, a superset).
Json messages_error(const Json& error_body);

}  // namespace dsv4::server
