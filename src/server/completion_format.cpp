#include "server/completion_format.h"

#include "server/logprobs_json.h"

namespace dsv4::server {

CompletionFormat::CompletionFormat(std::string model, int64_t created, const Tokenizer& tok, int logprobs,
                                   size_t num_choices)
    : ResponseFormat("cmpl-", "text_completion", std::move(model), created),
      tok_(tok),
      logprobs_(logprobs),
      text_(num_choices),
      lps_(num_choices),
      offset_(num_choices, 0) {}

Json CompletionFormat::logprobs_of(const Choice& c, const ChoiceUpdate& u) {
  if (logprobs_ < 0) return nullptr;
  Json obj;
  append_completion_logprobs(obj, tok_, u.token_ids, u.logprobs, logprobs_, offset_[static_cast<size_t>(c.index())],
                             tokens_as_ids_);
  return obj;
}

void CompletionFormat::stream(const Choice& c, const ChoiceUpdate& u, std::vector<Json>& chunks) {
  const bool has_logprobs = logprobs_ >= 0 && !u.token_ids.empty();
  if (u.text.empty() && !has_logprobs && !u.finished) return;
  Json choice = {{"index", c.index()}, {"text", u.text}, {"logprobs", logprobs_of(c, u)}};
  choice["finish_reason"] = u.finished ? Json(c.finish_reason()) : Json();
  choice["stop_reason"] = u.finished ? c.stop_reason() : Json();
  chunks.push_back(envelope("text_completion", Json::array({std::move(choice)})));
}

void CompletionFormat::collect(const Choice& c, const ChoiceUpdate& u) {
  const auto i = static_cast<size_t>(c.index());
  text_[i] += u.text;
  if (logprobs_ >= 0)
    append_completion_logprobs(lps_[i], tok_, u.token_ids, u.logprobs, logprobs_, offset_[i], tokens_as_ids_);
}

Json CompletionFormat::response(const GenerationJob& job) {
  Json choices = Json::array();
  for (const Choice& c : job.choices()) {
    const auto i = static_cast<size_t>(c.index());
    Json lp = logprobs_ >= 0 ? (lps_[i].is_object() ? lps_[i]
                                                    : Json{{"tokens", Json::array()},
                                                           {"token_logprobs", Json::array()},
                                                           {"top_logprobs", Json::array()},
                                                           {"text_offset", Json::array()}})
                             : Json();
    choices.push_back(Json{{"index", c.index()},
                           {"text", text_[i]},
                           {"logprobs", std::move(lp)},
                           {"finish_reason", c.finish_reason()},
                           {"stop_reason", c.stop_reason()}});
  }
  Json r = envelope("text_completion", std::move(choices));
  r["usage"] = usage_json(job.usage());
  return r;
}

}  // namespace dsv4::server
