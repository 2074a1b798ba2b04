// RequestStream: the output of one request, written by the engine thread and read by any other thread
// (an HTTP handler streaming SSE, or a batch client waiting for the end). Reads return what arrived
// since the previous read; the last one carries the finish reason and the usage counts.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/sampler.h"
#include "sched/request.h"

namespace dsv4 {

enum class FinishReason : uint8_t {
  kStop,    // EOS or a stop token id
  kLength,  // max_tokens, or max_model_len reached
  kAbort,   // abort() or engine shutdown
  kError,   // the step it ran in failed (RequestOutput::error says why)
};

std::string_view finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error"

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served by the prefix cache
};

struct TokenLogprobs {
  float logprob = 0;
  std::vector<TopLogprob> top;
};

struct RequestOutput {
  std::vector<int32_t> token_ids;       // new since the previous read
  std::vector<TokenLogprobs> logprobs;  // one per new token when the request asked for logprobs
  // With prompt_logprobs: prompt positions 1.. scored since the previous read, in order; all of them arrive
  // with the first token or before it.
  std::vector<PromptLogprob> prompt_logprobs;
  bool finished = false;
  std::optional<FinishReason> finish_reason;
  int32_t stop_token_id = -1;  // the stop id or EOS that ended it (kStop)
  std::string error;           // kError
  Usage usage;                 // counts so far
};

class RequestStream {
 public:
  explicit RequestStream(RequestId id) : id_(id) {}

  RequestId id() const { return id_; }
  // Waits up to `timeout` for new tokens or the end; returns what arrived since the previous read
  // (possibly nothing).
  RequestOutput read(std::chrono::milliseconds timeout);
  // Waits for the end; returns everything not yet read.
  RequestOutput wait();
  bool finished() const;

  // Engine side.
  void push(const SampledToken& token, const Usage& usage);
  // Scored prompt tokens, delivered with the next read (readers wake for the token that follows them).
  void add_prompt_logprobs(std::span<const PromptLogprob> scored);
  // `last`, when given, is the token that ended the request: it lands with the end in one step, so a
  // reader never sees it before it knows that it was the stop token.
  void finish(FinishReason reason, const Usage& usage, int32_t stop_token_id = -1, std::string error = {},
              const SampledToken* last = nullptr);

 private:
  RequestOutput take();
  void append(const SampledToken& token);  // under mu_

  const RequestId id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  RequestOutput pending_;
  bool finished_ = false;
};

}  // namespace dsv4
