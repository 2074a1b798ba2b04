#include "server/messages_format.h"

#include "server/sse.h"

namespace dsv4::server {
namespace {

using Kind = chat::ParseEvent::Kind;

Json text_block(bool thinking, const std::string& text) {
  if (thinking) return Json{{"type", "thinking"}, {"thinking", text}, {"signature", ""}};
  return Json{{"type", "text"}, {"text", text}};
}

// A tool call's arguments as the input object (the DSML parser gives a JSON object's text).
Json tool_input(const std::string& arguments) {
  Json input = Json::parse(arguments, nullptr, false);
  return input.is_object() ? input : Json::object();
}

}  // namespace

MessagesFormat::MessagesFormat(std::string model, int64_t created, AnswerOptions options)
    : ResponseFormat("msg_", "message", std::move(model), created),
      options_(options),
      parser_(answer_parser_options(options.thinking_mode, options.keep_special_tokens)) {}

void MessagesFormat::emit(std::vector<Json>* out, Json event) const {
  if (out != nullptr) out->push_back(std::move(event));
}

void MessagesFormat::close_block(std::vector<Json>* out) {
  if (open_ == Open::kNone) return;
  emit(out, Json{{"type", "content_block_stop"}, {"index", blocks_.size()}});
  blocks_.push_back(text_block(open_ == Open::kThinking, open_text_));
  open_ = Open::kNone;
}

void MessagesFormat::on_event(const chat::ParseEvent& e, std::vector<Json>* out) {
  if (e.kind == Kind::kToolCall) {
    if (e.tool_index > 0 && !options_.parallel_tool_calls) return;
    close_block(out);
    const Json input = tool_input(e.tool_call.arguments);
    const size_t index = blocks_.size();
    emit(out,
         Json{{"type", "content_block_start"},
              {"index", index},
              {"content_block",
               {{"type", "tool_use"}, {"id", e.tool_call.id}, {"name", e.tool_call.name}, {"input", Json::object()}}}});
    emit(out, Json{{"type", "content_block_delta"},
                   {"index", index},
                   {"delta", {{"type", "input_json_delta"}, {"partial_json", input.dump()}}}});
    emit(out, Json{{"type", "content_block_stop"}, {"index", index}});
    blocks_.push_back(Json{{"type", "tool_use"}, {"id", e.tool_call.id}, {"name", e.tool_call.name}, {"input", input}});
    tool_use_ = true;
    return;
  }
  if (e.text.empty()) return;
  const bool thinking = e.kind == Kind::kReasoning;
  const Open kind = thinking ? Open::kThinking : Open::kText;
  if (open_ != kind) {
    close_block(out);
    open_ = kind;
    open_text_.clear();
    emit(out,
         Json{{"type", "content_block_start"}, {"index", blocks_.size()}, {"content_block", text_block(thinking, "")}});
  }
  open_text_ += e.text;
  const Json delta = thinking ? Json{{"type", "thinking_delta"}, {"thinking", e.text}}
                              : Json{{"type", "text_delta"}, {"text", e.text}};
  emit(out, Json{{"type", "content_block_delta"}, {"index", blocks_.size()}, {"delta", delta}});
}

void MessagesFormat::feed(const Choice& c, const ChoiceUpdate& u, std::vector<Json>* out) {
  const std::vector<chat::ParseEvent> events = parse_update(parser_, u);
  for (const chat::ParseEvent& e : events) on_event(e, out);
  if (!u.finished) return;
  close_block(out);
  const Json stop = c.stop_reason();
  if (c.finish_reason() == "length") {
    stop_reason_ = "max_tokens";
  } else if (tool_use_) {
    stop_reason_ = "tool_use";
  } else if (stop.is_string()) {
    stop_reason_ = "stop_sequence";
    stop_sequence_ = stop;
  } else {
    stop_reason_ = "end_turn";
  }
}

// Anthropic counts the prompt's tokens read from the cache apart from input_tokens.
Json MessagesFormat::usage(const GenerationJob& job) const {
  const Usage u = job.usage();
  return Json{{"input_tokens", u.prompt_tokens - u.cached_tokens},
              {"output_tokens", u.completion_tokens},
              {"cache_creation_input_tokens", 0},
              {"cache_read_input_tokens", u.cached_tokens}};
}

void MessagesFormat::start(const GenerationJob& job, std::vector<Json>& chunks) {
  Json message{{"id", id()},
               {"type", "message"},
               {"role", "assistant"},
               {"model", model()},
               {"content", Json::array()},
               {"stop_reason", nullptr},
               {"stop_sequence", nullptr},
               {"usage", usage(job)}};
  emit(&chunks, Json{{"type", "message_start"}, {"message", std::move(message)}});
}

void MessagesFormat::stream(const Choice& c, const ChoiceUpdate& u, std::vector<Json>& chunks) { feed(c, u, &chunks); }

void MessagesFormat::finish(const GenerationJob& job, std::vector<Json>& chunks) {
  emit(&chunks, Json{{"type", "message_delta"},
                     {"delta", {{"stop_reason", stop_reason_}, {"stop_sequence", stop_sequence_}}},
                     {"usage", usage(job)}});
  emit(&chunks, Json{{"type", "message_stop"}});
}

void MessagesFormat::collect(const Choice& c, const ChoiceUpdate& u) { feed(c, u, nullptr); }

Json MessagesFormat::response(const GenerationJob& job) {
  return Json{{"id", id()},
              {"type", "message"},
              {"role", "assistant"},
              {"model", model()},
              {"content", blocks_},
              {"stop_reason", stop_reason_},
              {"stop_sequence", stop_sequence_},
              {"usage", usage(job)}};
}

std::string MessagesFormat::sse(const Json& chunk) const { return named_sse_event(chunk); }

Json MessagesFormat::error_chunk(const ApiError& e) const { return messages_error(Json::parse(error_body(e))); }

Json messages_error(const Json& error_body) {
  Json error{{"type", "api_error"}, {"message", ""}};
  if (const auto it = error_body.find("error"); it != error_body.end() && it->is_object()) {
    for (auto f = it->begin(); f != it->end(); ++f) error[f.key()] = f.value();
  }
  return Json{{"type", "error"}, {"error", std::move(error)}};
}

}  // namespace dsv4::server
