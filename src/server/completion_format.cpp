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
      offset_(num_choices, 0),
      opened_(num_choices, false),
      ids_(num_choices),
      scored_(num_choices) {}

void CompletionFormat::set_prompts(std::vector<EchoPrompt> prompts, int64_t n) {
  prompts_ = std::move(prompts);
  prompts_n_ = n;
}

std::string CompletionFormat::echo_once(size_t i, const ChoiceUpdate& u) {
  scored_[i].insert(scored_[i].end(), u.prompt_logprobs.begin(), u.prompt_logprobs.end());
  if (!echo_ || opened_[i] || (u.token_ids.empty() && !u.finished)) return {};
  opened_[i] = true;
  const EchoPrompt& p = prompt_of(i);
  if (logprobs_ >= 0)
    append_prompt_completion_logprobs(lps_[i], tok_, p.ids, scored_[i], logprobs_, offset_[i], tokens_as_ids_);
  return p.text;
}

Json CompletionFormat::logprobs_of(const Choice& c, const ChoiceUpdate& u) {
  if (logprobs_ < 0) return nullptr;
  Json obj;
  append_completion_logprobs(obj, tok_, u.token_ids, u.logprobs, logprobs_, offset_[static_cast<size_t>(c.index())],
                             tokens_as_ids_);
  return obj;
}

void CompletionFormat::stream(const Choice& c, const ChoiceUpdate& u, std::vector<Json>& chunks) {
  const auto i = static_cast<size_t>(c.index());
  const bool first = !opened_[i];
  const std::string text = echo_once(i, u) + u.text;  // echo streams text alone
  const bool has_logprobs = logprobs_ >= 0 && !u.token_ids.empty();
  const bool has_ids = token_ids_ && !u.token_ids.empty();
  if (text.empty() && !has_logprobs && !has_ids && !u.finished) return;
  Json choice = {{"index", c.index()}, {"text", text}, {"logprobs", logprobs_of(c, u)}};
  if (token_ids_) {
    if (first) choice["prompt_token_ids"] = prompt_of(i).ids;
    choice["token_ids"] = u.token_ids;
    opened_[i] = true;  // the prompt's ids go out once
  }
  choice["finish_reason"] = u.finished ? Json(c.finish_reason()) : Json();
  choice["stop_reason"] = u.finished ? c.stop_reason() : Json();
  chunks.push_back(envelope("text_completion", Json::array({std::move(choice)})));
}

void CompletionFormat::collect(const Choice& c, const ChoiceUpdate& u) {
  const auto i = static_cast<size_t>(c.index());
  text_[i] += echo_once(i, u);
  text_[i] += u.text;
  if (token_ids_) ids_[i].insert(ids_[i].end(), u.token_ids.begin(), u.token_ids.end());
  if (logprobs_ >= 0)
    append_completion_logprobs(lps_[i], tok_, u.token_ids, u.logprobs, logprobs_, offset_[i], tokens_as_ids_);
}

Json CompletionFormat::response(const GenerationJob& job) {
  Json choices = Json::array();
  for (const Choice& c : job.choices()) {
    const auto i = static_cast<size_t>(c.index());
    Json lp = logprobs_ >= 0 ? (lps_[i].is_object() ? lps_[i] : empty_completion_logprobs()) : Json();
    Json choice{{"index", c.index()},
                {"text", text_[i]},
                {"logprobs", std::move(lp)},
                {"finish_reason", c.finish_reason()},
                {"stop_reason", c.stop_reason()}};
    if (prompt_top_ >= 0)
      choice["prompt_logprobs"] = prompt_logprobs_json(tok_, scored_[i], prompt_top_, tokens_as_ids_);
    if (token_ids_) {
      choice["prompt_token_ids"] = prompt_of(i).ids;
      choice["token_ids"] = ids_[i];
    }
    choices.push_back(std::move(choice));
  }
  Json r = envelope("text_completion", std::move(choices));
  r["usage"] = usage_json(job.usage());
  return r;
}

}  // namespace dsv4::server
