// /v1/completions responses: {"object": "text_completion", "choices": [{"index", "text", "logprobs",
// "finish_reason", "stop_reason"}], "usage"}; streamed chunks have the same shape with the new text. With
// echo each choice's text starts with its prompt's (and its logprobs with the prompt's tokens); with
// prompt_logprobs each choice carries vLLM's "prompt_logprobs".
#pragma once

#include <string>
#include <vector>

#include "server/generation_job.h"
#include "server/response_format.h"

namespace dsv4::server {

// What echo repeats of a prompt: its text and its tokens.
struct EchoPrompt {
  std::string text;
  std::vector<int32_t> ids;
};

class CompletionFormat final : public ResponseFormat {
 public:
  // `logprobs`: -1 none, else the number of alternatives per token (0 = only the sampled one).
  CompletionFormat(std::string model, int64_t created, const Tokenizer& tok, int logprobs, size_t num_choices);

  void stream(const Choice& c, const ChoiceUpdate& u, std::vector<Json>& chunks) override;
  void collect(const Choice& c, const ChoiceUpdate& u) override;
  Json response(const GenerationJob& job) override;
  // return_tokens_as_token_ids: logprob tokens named "token_id:N".
  void name_tokens_by_id(bool on) { tokens_as_ids_ = on; }
  // echo: choice i starts with prompt i / n's text (and, with logprobs, its tokens; the request then scores
  // its prompt with `logprobs` alternatives).
  void echo(std::vector<EchoPrompt> prompts, int64_t n);
  // prompt_logprobs (vLLM's): each choice carries its prompt's scored tokens with `top_n` alternatives.
  void show_prompt_logprobs(int top_n) { prompt_top_ = top_n; }

 private:
  Json logprobs_of(const Choice& c, const ChoiceUpdate& u);
  // The echoed prompt of choice i, once, ahead of its first text: its text, and into lps_ its tokens.
  std::string echo_once(size_t i, const ChoiceUpdate& u);

  const Tokenizer& tok_;
  int logprobs_;
  bool tokens_as_ids_ = false;
  std::vector<std::string> text_;
  std::vector<Json> lps_;
  std::vector<int64_t> offset_;
  std::vector<EchoPrompt> echo_;  // empty: no echo
  int64_t echo_n_ = 1;
  std::vector<bool> echoed_;
  int prompt_top_ = -1;
  std::vector<std::vector<PromptLogprob>> scored_;  // per choice
};

}  // namespace dsv4::server
