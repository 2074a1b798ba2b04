// /v1/chat/completions responses. Generated text goes through the V4 completion parser, which splits it
// into reasoning, content and DSML tool calls: reasoning is returned as both `reasoning_content`
// (DeepSeek, llama.cpp, SGLang) and `reasoning` (vLLM), tool calls in OpenAI's shape with finish_reason
// "tool_calls". Streams open with the assistant role and send each tool call whole once it is parsed.
// include_reasoning false leaves the reasoning out; parallel_tool_calls false keeps the first tool call.
#pragma once

#include <vector>

#include "chat/completion_parser.h"
#include "server/response_format.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

struct ChatFormatOptions {
  // How the generated text starts: kThinking inside the reasoning (chat/assistant_prefill.h).
  chat::ThinkingMode thinking_mode = chat::ThinkingMode::kChat;
  bool logprobs = false;
  int top_logprobs = 0;
  bool tokens_as_ids = false;  // return_tokens_as_token_ids
  bool include_reasoning = true;
  bool parallel_tool_calls = true;
  bool keep_special_tokens = false;  // skip_special_tokens false
  int prompt_logprobs = -1;          // vLLM's prompt_logprobs (top-level, the first choice's prompt): -1 none
  // vLLM's return_token_ids: the prompt's ids at the top level ("prompt_token_ids", in a stream's role
  // chunks) and each choice's generated ids ("token_ids", in a stream with each update's first delta).
  bool return_token_ids = false;
};

class ChatFormat final : public ResponseFormat {
 public:
  ChatFormat(std::string model, int64_t created, const Tokenizer& tok, ChatFormatOptions options, size_t num_choices);

  void start(const GenerationJob& job, std::vector<Json>& chunks) override;
  void stream(const Choice& c, const ChoiceUpdate& u, std::vector<Json>& chunks) override;
  void collect(const Choice& c, const ChoiceUpdate& u) override;
  Json response(const GenerationJob& job) override;
  // The prompt's token ids, for return_token_ids.
  void set_prompt_ids(std::vector<int32_t> ids) { prompt_ids_ = std::move(ids); }

 private:
  struct State {
    chat::CompletionParser parser;
    chat::ParsedCompletion parsed;
    Json logprobs = Json::array();
    int tool_calls = 0;
    std::vector<PromptLogprob> prompt_logprobs;
    std::vector<int32_t> token_ids;  // return_token_ids
  };
  std::vector<chat::ParseEvent> parse(State& s, const ChoiceUpdate& u);
  std::string finish_reason(const Choice& c, const State& s) const;
  Json chunk(const Choice& c, Json delta) const;

  const Tokenizer& tok_;
  ChatFormatOptions options_;
  std::vector<State> states_;
  std::vector<int32_t> prompt_ids_;
};

}  // namespace dsv4::server
