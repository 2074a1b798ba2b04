// /v1/completions responses: {"object": "text_completion", "choices": [{"index", "text", "logprobs",
// "finish_reason", "stop_reason"}], "usage"}; streamed chunks have the same shape with the new text. With
// echo each choice's text starts with its prompt's (and its logprobs with the prompt's tokens); with
// prompt_logprobs each choice carries vLLM's "prompt_logprobs", with return_token_ids its prompt's and its
// own token ids ("prompt_token_ids" in a stream's first chunk of the choice, "token_ids" in each).
#pragma once

#include <string>
#include <vector>

#include "server/generation_job.h"
#include "server/response_format.h"

namespace dsv4::server {

// A prompt as echo repeats it (its text) and return_token_ids names it (its tokens).
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
  // The prompts of the choices, `n` a prompt (choice i's is prompt i / n), for echo and return_token_ids.
  void set_prompts(std::vector<EchoPrompt> prompts, int64_t n);
  // echo: choice i starts with its prompt's text (and, with logprobs, its tokens; the request then scores its
  // prompt with `logprobs` alternatives).
  void echo() { echo_ = true; }
  void return_token_ids() { token_ids_ = true; }
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
  const EchoPrompt& prompt_of(size_t i) const { return prompts_[i / static_cast<size_t>(prompts_n_)]; }

  std::vector<EchoPrompt> prompts_;
  int64_t prompts_n_ = 1;
  bool echo_ = false;
  std::vector<bool> opened_;  // the choice's first text or ids went out (its echo, its prompt's ids)
  bool token_ids_ = false;
  std::vector<std::vector<int32_t>> ids_;  // per choice, with return_token_ids
  int prompt_top_ = -1;
  std::vector<std::vector<PromptLogprob>> scored_;  // per choice
};

}  // namespace dsv4::server
