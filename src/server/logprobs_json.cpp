#include "server/logprobs_json.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace dsv4::server {
namespace {

double finite(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

std::string token_text(const Tokenizer& tok, int32_t id) { return tok.decode(std::span<const int32_t>(&id, 1)); }

// How a token is named in "token" fields and top_logprobs keys.
std::string token_name(const Tokenizer& tok, int32_t id, bool as_id) {
  return as_id ? fmt::format("token_id:{}", id) : token_text(tok, id);
}

Json token_bytes(const Tokenizer& tok, int32_t id) {
  Json bytes = Json::array();
  for (const unsigned char c : tok.token_bytes(id)) bytes.push_back(static_cast<int>(c));
  return bytes;
}

// Characters (code points) of valid UTF-8, as OpenAI's and vLLM's text_offset count them (Python's len()).
int64_t characters(std::string_view text) {
  return std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

Json chat_entry(const Tokenizer& tok, int32_t id, double logprob, bool as_id) {
  return Json{{"token", token_name(tok, id, as_id)}, {"logprob", logprob}, {"bytes", token_bytes(tok, id)}};
}

}  // namespace

Json empty_completion_logprobs() {
  return Json{{"tokens", Json::array()},
              {"token_logprobs", Json::array()},
              {"top_logprobs", Json::array()},
              {"text_offset", Json::array()}};
}

Json prompt_logprobs_json(const Tokenizer& tok, std::span<const PromptLogprob> scored, int top_n, bool tokens_as_ids) {
  Json out = Json::array({nullptr});
  for (const PromptLogprob& p : scored) {
    Json e = Json::object();
    const auto entry = [&](int32_t id, float logprob, int64_t rank) {
      e[std::to_string(id)] =
          Json{{"logprob", finite(logprob)}, {"rank", rank}, {"decoded_token", token_name(tok, id, tokens_as_ids)}};
    };
    entry(p.token, p.logprob, p.rank);
    for (size_t k = 0; k < p.top.size() && static_cast<int>(k) < top_n; ++k)
      entry(p.top[k].token, p.top[k].logprob, static_cast<int64_t>(k) + 1);
    out.push_back(std::move(e));
  }
  return out;
}

void append_prompt_completion_logprobs(Json& obj, const Tokenizer& tok, std::span<const int32_t> prompt,
                                       std::span<const PromptLogprob> scored, int top_n, int64_t& text_offset,
                                       bool tokens_as_ids) {
  if (!obj.is_object()) obj = empty_completion_logprobs();
  if (prompt.empty()) return;
  obj["tokens"].push_back(token_name(tok, prompt[0], tokens_as_ids));
  obj["token_logprobs"].push_back(nullptr);
  obj["top_logprobs"].push_back(nullptr);
  obj["text_offset"].push_back(text_offset);
  text_offset += characters(token_text(tok, prompt[0]));
  std::vector<TokenLogprobs> lps;
  for (const PromptLogprob& p : scored) lps.push_back({p.logprob, p.top});
  append_completion_logprobs(obj, tok, prompt.subspan(1), lps, top_n, text_offset, tokens_as_ids);
}

Json chat_logprobs_content(const Tokenizer& tok, std::span<const int32_t> ids, std::span<const TokenLogprobs> lps,
                           int top_n, bool tokens_as_ids) {
  Json content = Json::array();
  for (size_t i = 0; i < ids.size() && i < lps.size(); ++i) {
    Json e = chat_entry(tok, ids[i], finite(lps[i].logprob), tokens_as_ids);
    Json top = Json::array();
    for (size_t k = 0; k < lps[i].top.size() && static_cast<int>(k) < top_n; ++k) {
      top.push_back(chat_entry(tok, lps[i].top[k].token, finite(lps[i].top[k].logprob), tokens_as_ids));
    }
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return content;
}

void append_completion_logprobs(Json& obj, const Tokenizer& tok, std::span<const int32_t> ids,
                                std::span<const TokenLogprobs> lps, int top_n, int64_t& text_offset,
                                bool tokens_as_ids) {
  if (!obj.is_object()) obj = empty_completion_logprobs();
  for (size_t i = 0; i < ids.size() && i < lps.size(); ++i) {
    const std::string text = token_text(tok, ids[i]), name = token_name(tok, ids[i], tokens_as_ids);
    obj["tokens"].push_back(name);
    obj["token_logprobs"].push_back(finite(lps[i].logprob));
    Json top = Json::object();
    for (size_t k = 0; k < lps[i].top.size() && static_cast<int>(k) < top_n; ++k) {
      top[token_name(tok, lps[i].top[k].token, tokens_as_ids)] = finite(lps[i].top[k].logprob);
    }
    if (!top.contains(name)) top[name] = finite(lps[i].logprob);  // the sampled token is always listed
    obj["top_logprobs"].push_back(std::move(top));
    obj["text_offset"].push_back(text_offset);
    text_offset += characters(text);  // the decoded text is valid UTF-8 (partial characters are U+FFFD)
  }
}

}  // namespace dsv4::server
