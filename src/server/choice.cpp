#include "server/choice.h"

namespace dsv4::server {

Choice::Choice(int64_t index, std::shared_ptr<RequestStream> stream, OutputText text, bool include_stop_str,
               int32_t eos)
    : index_(index),
      stream_(std::move(stream)),
      text_(std::move(text)),
      include_stop_str_(include_stop_str),
      eos_(eos) {}

ChoiceUpdate Choice::poll(std::chrono::milliseconds timeout, const AbortFn& abort) {
  ChoiceUpdate u;
  if (finished_) return u;
  RequestOutput out = stream_->read(timeout);
  usage_.prompt_tokens = out.usage.prompt_tokens;
  usage_.cached_tokens = out.usage.cached_tokens;
  u.prompt_logprobs = std::move(out.prompt_logprobs);
  take_tokens(out, u, abort);
  if (!finished_ && out.finished) end(out, u);
  return u;
}

void Choice::take_tokens(const RequestOutput& out, ChoiceUpdate& u, const AbortFn& abort) {
  for (size_t i = 0; i < out.token_ids.size(); ++i) {
    const int32_t id = out.token_ids[i];
    ++tokens_seen_;
    u.token_ids.push_back(id);
    if (i < out.logprobs.size()) u.logprobs.push_back(out.logprobs[i]);
    // The token that ended the request (EOS or a stop id) is not text unless asked for (vLLM).
    const bool stop_token = out.finished && out.finish_reason == FinishReason::kStop && i + 1 == out.token_ids.size() &&
                            id == out.stop_token_id;
    if (!stop_token || include_stop_str_) u.text += text_.push(id);
    if (text_.stopped()) {
      stop_string_ = text_.stop_string();
      finished_ = true;
      u.finished = true;
      reason_ = FinishReason::kStop;
      usage_.completion_tokens = tokens_seen_;
      if (!out.finished) abort(stream_->id());
      return;
    }
  }
  usage_.completion_tokens = tokens_seen_;
}

void Choice::end(const RequestOutput& out, ChoiceUpdate& u) {
  u.text += text_.finish();
  finished_ = true;
  u.finished = true;
  reason_ = out.finish_reason.value_or(FinishReason::kAbort);
  stop_token_ = out.stop_token_id;
  error_ = out.error;
  usage_.completion_tokens = out.usage.completion_tokens;
}

std::string_view Choice::finish_reason() const {
  if (stop_string_) return "stop";
  return finish_reason_name(reason_);
}

Json Choice::stop_reason() const {
  if (stop_string_) return *stop_string_;
  if (reason_ == FinishReason::kStop && stop_token_ >= 0 && stop_token_ != eos_) return stop_token_;
  return nullptr;
}

}  // namespace dsv4::server
