#include "server/chat_format.h"

#include "server/logprobs_json.h"

namespace dsv4::server {
namespace {

using Kind = chat::ParseEvent::Kind;

Json text_delta(Kind kind, const std::string& text) {
  if (kind == Kind::kReasoning) return Json{{"reasoning_content", text}, {"reasoning", text}};
  return Json{{"content", text}};
}

Json tool_call_delta(const chat::ParseEvent& e) {
  return Json{{"tool_calls",
               Json::array({Json{{"index", e.tool_index},
                                 {"id", e.tool_call.id},
                                 {"type", "function"},
                                 {"function", {{"name", e.tool_call.name}, {"arguments", e.tool_call.arguments}}}}})}};
}

// Consecutive text events of one kind become one delta; each tool call is a delta of its own.
std::vector<Json> deltas(const std::vector<chat::ParseEvent>& events) {
  std::vector<Json> out;
  for (size_t i = 0; i < events.size();) {
    const chat::ParseEvent& e = events[i];
    if (e.kind == Kind::kToolCall) {
      out.push_back(tool_call_delta(e));
      ++i;
      continue;
    }
    std::string text;
    size_t j = i;
    for (; j < events.size() && events[j].kind == e.kind; ++j) text += events[j].text;
    if (!text.empty()) out.push_back(text_delta(e.kind, text));
    i = j;
  }
  return out;
}

}  // namespace

ChatFormat::ChatFormat(std::string model, int64_t created, const Tokenizer& tok, ChatFormatOptions options,
                       size_t num_choices)
    : ResponseFormat("chatcmpl-", "chat.completion.chunk", std::move(model), created), tok_(tok), options_(options) {
  states_.reserve(num_choices);
  for (size_t i = 0; i < num_choices; ++i) {
    states_.push_back(
        State{chat::CompletionParser(answer_parser_options(options_.thinking_mode, options_.keep_special_tokens)),
              {},
              Json::array(),
              0,
              {},
              {}});
  }
}

// The parser's events, less those the request asked to leave out.
std::vector<chat::ParseEvent> ChatFormat::parse(State& s, const ChoiceUpdate& u) {
  std::vector<chat::ParseEvent> events = parse_update(s.parser, u);
  std::erase_if(events, [this](const chat::ParseEvent& e) {
    return (e.kind == Kind::kReasoning && !options_.include_reasoning) ||
           (e.kind == Kind::kToolCall && e.tool_index > 0 && !options_.parallel_tool_calls);
  });
  for (const auto& e : events) {
    s.parsed.add(e);
    if (e.kind == Kind::kToolCall) ++s.tool_calls;
  }
  return events;
}

std::string ChatFormat::finish_reason(const Choice& c, const State& s) const {
  const std::string_view r = c.finish_reason();
  return r == "stop" && s.tool_calls > 0 ? "tool_calls" : std::string(r);
}

Json ChatFormat::chunk(const Choice& c, Json delta) const {
  return envelope(
      "chat.completion.chunk",
      Json::array({Json{
          {"index", c.index()}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}}}));
}

void ChatFormat::start(const GenerationJob& job, std::vector<Json>& chunks) {
  for (const Choice& c : job.choices()) {
    chunks.push_back(chunk(c, Json{{"role", "assistant"}, {"content", ""}}));
    if (options_.return_token_ids) chunks.back()["prompt_token_ids"] = prompt_ids_;
  }
}

void ChatFormat::stream(const Choice& c, const ChoiceUpdate& u, std::vector<Json>& chunks) {
  State& s = states_[static_cast<size_t>(c.index())];
  std::vector<Json> ds = deltas(parse(s, u));
  const bool has_logprobs = options_.logprobs && !u.token_ids.empty();
  const bool has_ids = options_.return_token_ids && !u.token_ids.empty();
  if (ds.empty() && (has_logprobs || has_ids)) ds.push_back(Json::object());
  for (size_t i = 0; i < ds.size(); ++i) {
    Json ch = chunk(c, std::move(ds[i]));
    if (i == 0 && has_logprobs) {
      ch["choices"][0]["logprobs"] =
          Json{{"content",
                chat_logprobs_content(tok_, u.token_ids, u.logprobs, options_.top_logprobs, options_.tokens_as_ids)}};
    }
    if (i == 0 && has_ids) ch["choices"][0]["token_ids"] = u.token_ids;
    chunks.push_back(std::move(ch));
  }
  if (u.finished) {
    Json ch = chunk(c, Json::object());
    ch["choices"][0]["finish_reason"] = finish_reason(c, s);
    ch["choices"][0]["stop_reason"] = c.stop_reason();
    chunks.push_back(std::move(ch));
  }
}

void ChatFormat::collect(const Choice& c, const ChoiceUpdate& u) {
  State& s = states_[static_cast<size_t>(c.index())];
  parse(s, u);
  s.prompt_logprobs.insert(s.prompt_logprobs.end(), u.prompt_logprobs.begin(), u.prompt_logprobs.end());
  if (options_.return_token_ids) s.token_ids.insert(s.token_ids.end(), u.token_ids.begin(), u.token_ids.end());
  if (options_.logprobs) {
    for (Json& e :
         chat_logprobs_content(tok_, u.token_ids, u.logprobs, options_.top_logprobs, options_.tokens_as_ids)) {
      s.logprobs.push_back(std::move(e));
    }
  }
}

Json ChatFormat::response(const GenerationJob& job) {
  Json choices = Json::array();
  for (const Choice& c : job.choices()) {
    const State& s = states_[static_cast<size_t>(c.index())];
    Json message = chat::to_openai_message(s.parsed);
    if (!s.parsed.reasoning_content.empty()) message["reasoning"] = s.parsed.reasoning_content;
    Json choice = {{"index", c.index()}, {"message", std::move(message)}};
    choice["logprobs"] = options_.logprobs ? Json{{"content", s.logprobs}} : Json();
    choice["finish_reason"] = finish_reason(c, s);
    choice["stop_reason"] = c.stop_reason();
    if (options_.return_token_ids) choice["token_ids"] = s.token_ids;
    choices.push_back(std::move(choice));
  }
  Json r = envelope("chat.completion", std::move(choices));
  if (options_.return_token_ids) r["prompt_token_ids"] = prompt_ids_;
  if (options_.prompt_logprobs >= 0 && !states_.empty())
    r["prompt_logprobs"] =
        prompt_logprobs_json(tok_, states_[0].prompt_logprobs, options_.prompt_logprobs, options_.tokens_as_ids);
  r["usage"] = usage_json(job.usage());
  return r;
}

}  // namespace dsv4::server
