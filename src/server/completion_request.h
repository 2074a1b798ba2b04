// POST /v1/completions, parsed: the prompts (text, or token ids, one or many) and the generation options.
// The prompt text is tokenized as is: no BOS is added (vLLM adds the tokenizer's BOS, and V4's tokenizer
// adds none either; send "<｜begin▁of▁sentence｜>" in the text to have one). `suffix` is refused. `echo`
// repeats each prompt ahead of its choices' text; with logprobs the prompt's tokens are scored too (as
// lm-evaluation-harness asks for loglikelihoods), which a stream cannot carry.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "server/generation_options.h"
#include "server/structured_output_request.h"

namespace dsv4::server {

struct PromptInput {
  std::optional<std::string> text;  // to tokenize; else `ids`
  std::vector<int32_t> ids;
};

struct CompletionRequest {
  GenerationOptions options;
  std::vector<PromptInput> prompts;
  StructuredOutputRequest structured;
  bool echo = false;
  int32_t show_prompt_logprobs = -1;  // prompt_logprobs as asked (echo with logprobs scores the prompt anyway)
};

inline constexpr size_t kMaxPrompts = 1024;

CompletionRequest parse_completion_request(const Json& body);

}  // namespace dsv4::server
