#include "engine/request_stream.h"

namespace dsv4 {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAbort:
      return "abort";
    case FinishReason::kError:
      return "error";
  }
  return "?";
}

RequestOutput RequestStream::take() {
  RequestOutput out = std::move(pending_);
  pending_ = {};
  pending_.usage = out.usage;
  pending_.finished = out.finished;
  pending_.finish_reason = out.finish_reason;
  pending_.stop_token_id = out.stop_token_id;
  pending_.error = out.error;
  return out;
}

RequestOutput RequestStream::read(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return finished_ || !pending_.token_ids.empty(); });
  return take();
}

RequestOutput RequestStream::wait() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return finished_; });
  return take();
}

bool RequestStream::finished() const {
  std::lock_guard lock(mu_);
  return finished_;
}

void RequestStream::push(const SampledToken& token, const Usage& usage) {
  {
    std::lock_guard lock(mu_);
    if (finished_) return;
    append(token);
    pending_.usage = usage;
  }
  cv_.notify_all();
}

void RequestStream::add_prompt_logprobs(std::span<const PromptLogprob> scored) {
  std::lock_guard lock(mu_);
  if (finished_) return;
  pending_.prompt_logprobs.insert(pending_.prompt_logprobs.end(), scored.begin(), scored.end());
}

void RequestStream::append(const SampledToken& token) {
  pending_.token_ids.push_back(token.token);
  if (token.has_logprobs) pending_.logprobs.push_back({token.logprob, token.top});
}

void RequestStream::finish(FinishReason reason, const Usage& usage, int32_t stop_token_id, std::string error,
                           const SampledToken* last) {
  {
    std::lock_guard lock(mu_);
    if (finished_) return;
    if (last != nullptr) append(*last);
    finished_ = true;
    pending_.finished = true;
    pending_.finish_reason = reason;
    pending_.stop_token_id = stop_token_id;
    pending_.error = std::move(error);
    pending_.usage = usage;
  }
  cv_.notify_all();
}

}  // namespace dsv4
