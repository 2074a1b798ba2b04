// One choice of a generation request: its engine stream, its text so far, and how it ended. The HTTP
// handlers poll choices; a choice turns engine outputs into final text (stop strings applied, the stop
// token's text left out unless asked for) and decides the finish reason.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/request_stream.h"
#include "server/output_text.h"
#include "server/request_fields.h"

namespace dsv4::server {

struct ChoiceUpdate {
  std::string text;                            // new final text
  std::vector<int32_t> token_ids;              // the tokens this update covers
  std::vector<TokenLogprobs> logprobs;         // one per token, when the request asked for logprobs
  std::vector<PromptLogprob> prompt_logprobs;  // prompt positions scored since the last update (prompt_logprobs)
  bool finished = false;                       // this update ends the choice
};

class Choice {
 public:
  using AbortFn = std::function<void(RequestId)>;

  // `eos` ends a choice without a stop_reason (vLLM).
  Choice(int64_t index, std::shared_ptr<RequestStream> stream, OutputText text, bool include_stop_str, int32_t eos);

  // What the engine produced since the last call, waiting up to `timeout` for something. A stop string
  // ends the choice at once (the engine request is aborted through `abort`).
  ChoiceUpdate poll(std::chrono::milliseconds timeout, const AbortFn& abort);

  int64_t index() const { return index_; }
  RequestId id() const { return stream_->id(); }
  bool finished() const { return finished_; }
  // "stop", "length", "abort" or "error" (valid once finished).
  std::string_view finish_reason() const;
  // vLLM's stop_reason: the stop string or stop token id (not EOS) that ended it, else null.
  Json stop_reason() const;
  bool failed() const { return reason_ == FinishReason::kError; }
  bool aborted() const { return reason_ == FinishReason::kAbort && !stop_string_; }
  const std::string& error() const { return error_; }
  // Completion tokens stop at a stop string (the engine may have run a little further).
  const Usage& usage() const { return usage_; }

 private:
  void take_tokens(const RequestOutput& out, ChoiceUpdate& u, const AbortFn& abort);
  void end(const RequestOutput& out, ChoiceUpdate& u);

  int64_t index_;
  std::shared_ptr<RequestStream> stream_;
  OutputText text_;
  bool include_stop_str_;
  int32_t eos_;
  bool finished_ = false;
  FinishReason reason_ = FinishReason::kStop;
  std::optional<std::string> stop_string_;
  int32_t stop_token_ = -1;
  std::string error_;
  Usage usage_;
  int64_t tokens_seen_ = 0;
};

}  // namespace dsv4::server
