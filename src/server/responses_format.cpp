#include "server/responses_format.h"

#include "server/logprobs_json.h"
#include "server/sse.h"

namespace dsv4::server {
namespace {

using Kind = chat::ParseEvent::Kind;

// The content part of a text item: output_text (a message, with its tokens' logprobs) or reasoning_text.
Json text_part(bool reasoning, const std::string& text, Json logprobs = Json::array()) {
  if (reasoning) return Json{{"type", "reasoning_text"}, {"text", text}};
  return Json{
      {"type", "output_text"}, {"text", text}, {"annotations", Json::array()}, {"logprobs", std::move(logprobs)}};
}

Json text_item(bool reasoning, const std::string& id, const std::string& status, Json content) {
  if (reasoning) {
    return Json{{"id", id},
                {"type", "reasoning"},
                {"summary", Json::array()},
                {"content", std::move(content)},
                {"status", status}};
  }
  return Json{
      {"id", id}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
}

}  // namespace

ResponsesFormat::ResponsesFormat(std::string model, int64_t created, const Tokenizer& tok,
                                 ResponsesFormatOptions options, Json echo)
    : ResponseFormat("resp_", "response", std::move(model), created),
      tok_(tok),
      options_(options),
      echo_(std::move(echo)),
      parser_(answer_parser_options(options.thinking_mode, options.keep_special_tokens)),
      thinking_(options.thinking_mode == chat::ThinkingMode::kThinking),
      end_think_(tok.token_to_id("</think>")) {}

void ResponsesFormat::emit(std::vector<Json>* out, Json event) {
  if (out == nullptr) return;
  event["sequence_number"] = sequence_++;
  out->push_back(std::move(event));
}

// A reasoning or message item opens: output_item.added, then its one content part.
void ResponsesFormat::open_text(Open kind, std::vector<Json>* out) {
  const bool reasoning = kind == Open::kReasoning;
  open_ = kind;
  open_id_ = (reasoning ? "rs_" : "msg_") + random_hex(32);
  open_text_.clear();
  open_logprobs_ = Json::array();
  const int64_t index = static_cast<int64_t>(items_.size());
  emit(out, Json{{"type", "response.output_item.added"},
                 {"output_index", index},
                 {"item", text_item(reasoning, open_id_, "in_progress", Json::array())}});
  emit(out, Json{{"type", "response.content_part.added"},
                 {"item_id", open_id_},
                 {"output_index", index},
                 {"content_index", 0},
                 {"part", text_part(reasoning, "")}});
}

// The open text item is whole: its done events, and it joins the output.
void ResponsesFormat::close_text(std::vector<Json>* out) {
  if (open_ == Open::kNone) return;
  const bool reasoning = open_ == Open::kReasoning;
  const int64_t index = static_cast<int64_t>(items_.size());
  Json done{{"type", reasoning ? "response.reasoning_text.done" : "response.output_text.done"},
            {"item_id", open_id_},
            {"output_index", index},
            {"content_index", 0},
            {"text", open_text_}};
  if (!reasoning) done["logprobs"] = open_logprobs_;
  emit(out, std::move(done));
  emit(out, Json{{"type", "response.content_part.done"},
                 {"item_id", open_id_},
                 {"output_index", index},
                 {"content_index", 0},
                 {"part", text_part(reasoning, open_text_, open_logprobs_)}});
  // An item the token limit cut is incomplete (known here once the choice finished).
  const std::string status = finish_reason_ == "length" ? "incomplete" : "completed";
  Json item = text_item(reasoning, open_id_, status, Json::array({text_part(reasoning, open_text_, open_logprobs_)}));
  emit(out, Json{{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
  items_.push_back(std::move(item));
  open_ = Open::kNone;
}

// DSML tool calls arrive whole: added, the arguments as one delta, done.
void ResponsesFormat::add_tool_call(const chat::ToolCall& call, std::vector<Json>* out) {
  close_text(out);
  const std::string id = "fc_" + random_hex(32);
  const int64_t index = static_cast<int64_t>(items_.size());
  Json item{{"id", id},           {"type", "function_call"}, {"status", "in_progress"},
            {"call_id", call.id}, {"name", call.name},       {"arguments", ""}};
  emit(out, Json{{"type", "response.output_item.added"}, {"output_index", index}, {"item", item}});
  emit(out, Json{{"type", "response.function_call_arguments.delta"},
                 {"item_id", id},
                 {"output_index", index},
                 {"delta", call.arguments}});
  emit(out, Json{{"type", "response.function_call_arguments.done"},
                 {"item_id", id},
                 {"output_index", index},
                 {"name", call.name},
                 {"arguments", call.arguments}});
  item["status"] = "completed";
  item["arguments"] = call.arguments;
  emit(out, Json{{"type", "response.output_item.done"}, {"output_index", index}, {"item", item}});
  items_.push_back(std::move(item));
  ++tool_calls_;
}

void ResponsesFormat::on_event(const chat::ParseEvent& e, std::vector<Json>* out) {
  if (e.kind == Kind::kToolCall) {
    pending_logprobs_ = Json::array();  // the call's tokens: no output text carries them
    if (e.tool_index == 0 || options_.parallel_tool_calls) add_tool_call(e.tool_call, out);
    return;
  }
  if (!e.text.empty()) text_delta(e.kind == Kind::kReasoning ? Open::kReasoning : Open::kMessage, e.text, out);
}

// A text delta into the open item of its kind (opened first if need be). An output_text delta carries the
// logprobs of the tokens since the last one; a reasoning delta's tokens have none.
void ResponsesFormat::text_delta(Open kind, const std::string& text, std::vector<Json>* out) {
  if (open_ != kind) {
    close_text(out);
    open_text(kind, out);
  }
  open_text_ += text;
  const bool reasoning = kind == Open::kReasoning;
  Json delta{{"type", reasoning ? "response.reasoning_text.delta" : "response.output_text.delta"},
             {"item_id", open_id_},
             {"output_index", static_cast<int64_t>(items_.size())},
             {"content_index", 0},
             {"delta", text}};
  if (!reasoning) {
    for (const Json& lp : pending_logprobs_) open_logprobs_.push_back(lp);
    delta["logprobs"] = std::move(pending_logprobs_);
  }
  pending_logprobs_ = Json::array();
  emit(out, std::move(delta));
}

void ResponsesFormat::feed(const Choice& c, const ChoiceUpdate& u, std::vector<Json>* out) {
  for (size_t i = 0; i < u.token_ids.size() && thinking_; ++i) {
    ++reasoning_tokens_;
    thinking_ = u.token_ids[i] != end_think_;
  }
  const std::vector<chat::ParseEvent> events = parse_update(parser_, u);
  if (options_.logprobs && !u.token_ids.empty()) {
    for (Json& lp : chat_logprobs_content(tok_, u.token_ids, u.logprobs, options_.top_logprobs, options_.tokens_as_ids))
      pending_logprobs_.push_back(std::move(lp));
  }
  for (const chat::ParseEvent& e : events) on_event(e, out);
  if (!u.finished) return;
  finish_reason_ = std::string(c.finish_reason());
  // Tokens whose text never showed (an end token, held-back bytes) still have their logprobs: with the
  // message, in an empty delta.
  if (!pending_logprobs_.empty() && (open_ == Open::kMessage || (open_ == Open::kNone && items_.empty()))) {
    text_delta(Open::kMessage, "", out);
  }
  close_text(out);
  if (items_.empty()) {  // nothing generated: an empty message, as the object always has an answer
    open_text(Open::kMessage, out);
    close_text(out);
  }
}

void ResponsesFormat::start(const GenerationJob& job, std::vector<Json>& chunks) {
  const Json object = this->object(job, "in_progress");
  emit(&chunks, Json{{"type", "response.created"}, {"response", object}});
  emit(&chunks, Json{{"type", "response.in_progress"}, {"response", object}});
}

void ResponsesFormat::stream(const Choice& c, const ChoiceUpdate& u, std::vector<Json>& chunks) { feed(c, u, &chunks); }

void ResponsesFormat::finish(const GenerationJob& job, std::vector<Json>& chunks) {
  const std::string s = status();
  // A cancelled response ends as an incomplete one does (the stream has no event of its own for it).
  emit(&chunks,
       Json{{"type", s == "completed" ? "response.completed" : "response.incomplete"}, {"response", object(job, s)}});
}

void ResponsesFormat::collect(const Choice& c, const ChoiceUpdate& u) { feed(c, u, nullptr); }

Json ResponsesFormat::response(const GenerationJob& job) { return object(job, status()); }

// incomplete when the token limit ended it, cancelled when the server aborted it (shutting down).
std::string ResponsesFormat::status() const {
  if (finish_reason_ == "length") return "incomplete";
  return finish_reason_ == "abort" ? "cancelled" : "completed";
}

// The response object: the output so far (none while in progress), usage once done, and what the request
// set (echo_).
Json ResponsesFormat::object(const GenerationJob& job, const std::string& status) const {
  const bool done = status != "in_progress";
  Json r{{"id", id()},
         {"object", "response"},
         {"created_at", job.created()},
         {"status", status},
         {"background", false},
         {"error", nullptr},
         {"incomplete_details", status == "incomplete" ? Json{{"reason", "max_output_tokens"}} : Json()},
         {"model", model()},
         {"output", done ? items_ : Json::array()},
         {"previous_response_id", nullptr},
         {"store", false},
         {"truncation", "disabled"}};
  for (auto it = echo_.begin(); it != echo_.end(); ++it) r[it.key()] = it.value();
  if (r["reasoning"].is_null()) r["reasoning"] = Json{{"effort", nullptr}, {"summary", nullptr}};
  if (!done) {
    r["usage"] = nullptr;
    return r;
  }
  const Usage u = job.usage();
  r["usage"] = Json{{"input_tokens", u.prompt_tokens},
                    {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
                    {"output_tokens", u.completion_tokens},
                    {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens_}}},
                    {"total_tokens", u.prompt_tokens + u.completion_tokens}};
  return r;
}

std::string ResponsesFormat::sse(const Json& chunk) const { return named_sse_event(chunk); }

}  // namespace dsv4::server
