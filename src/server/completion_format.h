// /v1/completions responses: {"object": "text_completion", "choices": [{"index", "text", "logprobs",
// "finish_reason", "stop_reason"}], "usage"}; streamed chunks have the same shape with the new text.
#pragma once

#include <vector>

#include "server/response_format.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

class CompletionFormat final : public ResponseFormat {
 public:
  // `logprobs`: -1 none, else the number of alternatives per token (0 = only the sampled one).
  CompletionFormat(std::string model, int64_t created, const Tokenizer& tok, int logprobs, size_t num_choices);

  void stream(const Choice& c, const ChoiceUpdate& u, std::vector<Json>& chunks) override;
  void collect(const Choice& c, const ChoiceUpdate& u) override;
  Json response(const GenerationJob& job) override;
  // return_tokens_as_token_ids: logprob tokens named "token_id:N".
  void name_tokens_by_id(bool on) { tokens_as_ids_ = on; }

 private:
  Json logprobs_of(const Choice& c, const ChoiceUpdate& u);

  const Tokenizer& tok_;
  int logprobs_;
  bool tokens_as_ids_ = false;
  std::vector<std::string> text_;
  std::vector<Json> lps_;
  std::vector<int64_t> offset_;
};

}  // namespace dsv4::server
