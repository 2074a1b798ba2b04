#include "server/generation_options.h"

#include <charconv>

#include "server/api_error.h"

namespace dsv4::server {
namespace {

std::vector<std::string> parse_stop(const RequestFields& f) {
  const Json* v = f.get("stop");
  if (v == nullptr) return {};
  std::vector<std::string> stops;
  if (v->is_string()) {
    stops.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (const Json& s : *v) {
      if (!s.is_string())
        bad_request("stop", "'stop' must be a string or an array of strings, got {}", json_excerpt(s));
      stops.push_back(s.get<std::string>());
    }
  } else {
    bad_request("stop", "'stop' must be a string or an array of strings, got {}", json_excerpt(*v));
  }
  if (stops.size() > kMaxStopStrings)
    bad_request("stop", "'stop' holds {} strings, at most {}", stops.size(), kMaxStopStrings);
  for (const std::string& s : stops) {
    if (s.empty()) bad_request("stop", "'stop' strings must not be empty");
  }
  return stops;
}

std::vector<int32_t> parse_token_ids(const RequestFields& f, std::string_view key) {
  const Json* v = f.array(key);
  std::vector<int32_t> ids;
  if (v == nullptr) return ids;
  for (const Json& id : *v) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      bad_request(f.name(key), "'{}' must hold token ids (non-negative integers), got {}", f.name(key),
                  json_excerpt(id));
    }
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

// {"token id": bias}, bias in [-100, 100] (OpenAI's range).
std::unordered_map<int32_t, float> parse_logit_bias(const RequestFields& f) {
  std::unordered_map<int32_t, float> bias;
  const Json* v = f.object("logit_bias");
  if (v == nullptr) return bias;
  for (const auto& [key, value] : v->items()) {
    int64_t id = -1;
    const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || id < 0 || id > INT32_MAX) {
      bad_request("logit_bias", "'logit_bias' keys must be token ids, got \"{}\"", key);
    }
    if (!value.is_number() || value.get<double>() < -100 || value.get<double>() > 100) {
      bad_request("logit_bias", "'logit_bias' values must be numbers in [-100, 100], got {}", json_excerpt(value));
    }
    bias[static_cast<int32_t>(id)] = value.get<float>();
  }
  return bias;
}

std::vector<std::string> parse_bad_words(const RequestFields& f) {
  const Json* v = f.array("bad_words");
  std::vector<std::string> words;
  if (v == nullptr) return words;
  if (v->size() > kMaxBadWords)
    bad_request("bad_words", "'bad_words' holds {} words, at most {}", v->size(), kMaxBadWords);
  for (const Json& w : *v) {
    if (!w.is_string()) bad_request("bad_words", "'bad_words' must be an array of strings, got {}", json_excerpt(w));
    words.push_back(w.get<std::string>());
  }
  return words;
}

// vLLM's: an empty list is refused (it would allow nothing).
std::vector<int32_t> parse_allowed_token_ids(const RequestFields& f) {
  std::vector<int32_t> ids = parse_token_ids(f, "allowed_token_ids");
  if (f.has("allowed_token_ids") && ids.empty()) bad_request("allowed_token_ids", "'allowed_token_ids' is empty");
  return ids;
}

void parse_truncation(const RequestFields& f, GenerationOptions& o) {
  o.truncate_prompt_tokens = f.integer_in("truncate_prompt_tokens", -1, INT64_MAX);
  const auto side = f.string("truncation_side");
  if (side && *side != "left" && *side != "right") {
    bad_request("truncation_side", "'truncation_side' must be \"left\" or \"right\", got \"{}\"", *side);
  }
  o.truncate_left = side.value_or("left") == "left";
}

void parse_stream_options(const RequestFields& f, GenerationOptions& o) {
  const Json* so = f.object("stream_options");
  if (so == nullptr) return;
  if (!o.stream) bad_request("stream_options", "'stream_options' is only allowed when 'stream' is true");
  const RequestFields s(*so, "stream_options.");
  o.include_usage = s.boolean("include_usage").value_or(false);
  o.continuous_usage_stats = s.boolean("continuous_usage_stats").value_or(false);
}

}  // namespace

GenerationOptions parse_generation_options(const RequestFields& f,
                                           std::initializer_list<std::string_view> max_tokens_keys) {
  GenerationOptions o;
  o.model = f.string("model").value_or("");
  o.temperature = f.number_in("temperature", 0, 100);
  o.top_p = f.number("top_p");
  if (o.top_p && !(*o.top_p > 0 && *o.top_p <= 1)) bad_request("top_p", "'top_p' must be in (0, 1], got {}", *o.top_p);
  o.top_k = f.integer_in("top_k", -1, INT32_MAX);
  o.min_p = f.number_in("min_p", 0, 1);
  o.repetition_penalty = f.number("repetition_penalty");
  if (o.repetition_penalty && !(*o.repetition_penalty > 0 && *o.repetition_penalty <= 100)) {
    bad_request("repetition_penalty", "'repetition_penalty' must be in (0, 100], got {}", *o.repetition_penalty);
  }
  o.presence_penalty = f.number_in("presence_penalty", -2, 2).value_or(0);
  o.frequency_penalty = f.number_in("frequency_penalty", -2, 2).value_or(0);
  if (const auto seed = f.integer("seed")) o.seed = static_cast<uint64_t>(*seed);
  o.logit_bias = parse_logit_bias(f);
  o.ignore_eos = f.boolean("ignore_eos").value_or(false);
  o.min_tokens = f.integer_in("min_tokens", 0, INT32_MAX).value_or(0);
  o.stop_token_ids = parse_token_ids(f, "stop_token_ids");
  o.allowed_token_ids = parse_allowed_token_ids(f);
  o.bad_words = parse_bad_words(f);
  parse_truncation(f, o);
  o.priority = f.integer("priority").value_or(0);
  o.request_id = f.string("request_id").value_or("");
  o.tokens_as_ids = f.boolean("return_tokens_as_token_ids").value_or(false);
  for (std::string_view key : max_tokens_keys) {
    if (const auto m = f.integer(key)) {
      if (*m < 1) bad_request(std::string(key), "'{}' must be at least 1, got {}", key, *m);
      o.max_tokens = *m;
      break;
    }
  }
  if (o.max_tokens && o.min_tokens > *o.max_tokens) {
    bad_request("min_tokens", "'min_tokens' ({}) must not exceed the maximum tokens ({})", o.min_tokens, *o.max_tokens);
  }
  o.stop = parse_stop(f);
  o.include_stop_str_in_output = f.boolean("include_stop_str_in_output").value_or(false);
  o.skip_special_tokens = f.boolean("skip_special_tokens");
  o.n = f.integer_in("n", 1, kMaxChoices).value_or(1);
  o.stream = f.boolean("stream").value_or(false);
  parse_stream_options(f, o);
  o.prompt_logprobs = static_cast<int32_t>(f.integer_in("prompt_logprobs", 0, kMaxLogprobs).value_or(-1));
  o.return_token_ids = f.boolean("return_token_ids").value_or(false);
  if (o.prompt_logprobs >= 0 && o.stream) {  // vLLM's rule
    bad_request("prompt_logprobs", "'prompt_logprobs' is not available when 'stream' is true");
  }
  o.cache_salt = f.string("cache_salt").value_or("");
  return o;
}

SamplingParams GenerationOptions::sampling(const SamplingDefaults& d, int64_t max_tokens_value, int64_t index) const {
  SamplingParams p;
  p.temperature = temperature.value_or(d.temperature.value_or(p.temperature));
  p.top_p = top_p.value_or(d.top_p.value_or(p.top_p));
  p.top_k = top_k.value_or(d.top_k.value_or(p.top_k));
  p.min_p = min_p.value_or(d.min_p.value_or(p.min_p));
  p.repetition_penalty = repetition_penalty.value_or(d.repetition_penalty.value_or(p.repetition_penalty));
  p.presence_penalty = presence_penalty;
  p.frequency_penalty = frequency_penalty;
  if (seed) p.seed = *seed + static_cast<uint64_t>(index);
  p.logit_bias = logit_bias;
  p.ignore_eos = ignore_eos;
  p.min_tokens = min_tokens;
  p.stop_token_ids = stop_token_ids;
  p.allowed_token_ids = allowed_token_ids;
  p.bad_words = bad_words_ids;
  p.max_tokens = max_tokens_value;
  p.logprobs = logprobs;
  p.prompt_logprobs = prompt_logprobs;
  p.constraint = constraint;
  return p;
}

}  // namespace dsv4::server
