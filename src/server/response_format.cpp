#include "server/response_format.h"

#include <fmt/format.h>

#include <random>

#include "server/sse.h"

namespace dsv4::server {

std::string random_hex(size_t n) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::string s;
  while (s.size() < n) s += fmt::format("{:016x}", rng());
  return s.substr(0, n);
}

ResponseFormat::ResponseFormat(std::string id_prefix, std::string chunk_object, std::string model, int64_t created)
    : id_prefix_(std::move(id_prefix)),
      id_(id_prefix_ + random_hex(32)),
      chunk_object_(std::move(chunk_object)),
      model_(std::move(model)),
      created_(created) {}

void ResponseFormat::start(const GenerationJob&, std::vector<Json>&) {}
void ResponseFormat::finish(const GenerationJob&, std::vector<Json>&) {}
std::string ResponseFormat::sse(const Json& chunk) const { return sse_event(chunk); }
Json ResponseFormat::error_chunk(const ApiError& e) const { return Json::parse(error_body(e)); }

Json ResponseFormat::envelope(std::string_view object, Json choices) const {
  return Json{
      {"id", id_}, {"object", object}, {"created", created_}, {"model", model_}, {"choices", std::move(choices)}};
}

std::vector<chat::ParseEvent> parse_update(chat::CompletionParser& parser, const ChoiceUpdate& u) {
  std::vector<chat::ParseEvent> events = parser.feed(u.text);
  if (u.finished) {
    auto tail = parser.finish();
    events.insert(events.end(), std::make_move_iterator(tail.begin()), std::make_move_iterator(tail.end()));
  }
  return events;
}

chat::ParserOptions answer_parser_options(chat::ThinkingMode mode, bool keep_special_tokens) {
  chat::ParserOptions po;
  po.thinking_mode = mode;
  po.keep_special_tokens = keep_special_tokens;
  return po;
}

Json usage_json(const Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

Json ResponseFormat::usage_chunk(const GenerationJob& job) const {
  Json chunk = envelope(chunk_object_, Json::array());
  chunk["usage"] = usage_json(job.usage());
  return chunk;
}

}  // namespace dsv4::server
