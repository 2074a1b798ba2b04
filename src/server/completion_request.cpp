#include "server/completion_request.h"

#include <algorithm>

#include "server/api_error.h"
#include "server/unsupported_fields.h"

namespace dsv4::server {
namespace {

std::vector<int32_t> token_ids(const Json& array) {
  std::vector<int32_t> ids;
  ids.reserve(array.size());
  for (const Json& id : array) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX) {
      bad_request("prompt", "'prompt' token ids must be non-negative integers, got {}", json_excerpt(id));
    }
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

// A string, an array of strings, an array of token ids, or an array of arrays of token ids.
std::vector<PromptInput> parse_prompts(const RequestFields& f) {
  const Json* p = f.get("prompt");
  if (p == nullptr) bad_request("prompt", "'prompt' is required");
  std::vector<PromptInput> prompts;
  if (p->is_string()) {
    prompts.push_back({p->get<std::string>(), {}});
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    prompts.push_back({std::nullopt, token_ids(*p)});
  } else if (p->is_array() && !p->empty()) {
    for (const Json& item : *p) {
      if (item.is_string()) {
        prompts.push_back({item.get<std::string>(), {}});
      } else if (item.is_array()) {
        prompts.push_back({std::nullopt, token_ids(item)});
      } else {
        bad_request("prompt", "'prompt' items must be strings or arrays of token ids, got {}", json_excerpt(item));
      }
    }
  } else {
    bad_request("prompt", "'prompt' must be a string, an array of strings or token ids, got {}", json_excerpt(*p));
  }
  if (prompts.size() > kMaxPrompts)
    bad_request("prompt", "'prompt' holds {} prompts, at most {}", prompts.size(), kMaxPrompts);
  return prompts;
}

}  // namespace

CompletionRequest parse_completion_request(const Json& body) {
  const RequestFields f(body);
  refuse_unsupported(f, Endpoint::kCompletions);
  CompletionRequest r;
  r.prompts = parse_prompts(f);
  r.options = parse_generation_options(f, {"max_tokens"});
  r.structured = parse_structured_output(f);
  r.options.logprobs = static_cast<int32_t>(f.integer_in("logprobs", 0, kMaxLogprobs).value_or(-1));
  r.echo = f.boolean("echo").value_or(false);
  r.show_prompt_logprobs = r.options.prompt_logprobs;
  if (r.echo && r.options.logprobs >= 0) {
    if (r.options.stream) bad_request("echo", "'echo' with 'logprobs' is not available when 'stream' is true");
    r.options.prompt_logprobs = std::max(r.options.prompt_logprobs, r.options.logprobs);
  }
  return r;
}

}  // namespace dsv4::server
