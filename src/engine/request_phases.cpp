#include "engine/request_phases.h"

#include "core/vllm_buckets.h"

namespace dsv4 {
namespace {

double seconds(RequestPhases::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

RequestHistograms::RequestHistograms(int64_t max_model_len)
    : queue(vllm_buckets::request_latency()),
      prefill(vllm_buckets::request_latency()),
      decode(vllm_buckets::request_latency()),
      inference(vllm_buckets::request_latency()),
      time_per_output_token(vllm_buckets::inter_token()),
      prompt_tokens(vllm_buckets::one_two_five(max_model_len)),
      generation_tokens(vllm_buckets::one_two_five(max_model_len)),
      max_tokens(vllm_buckets::one_two_five(max_model_len)) {}

void RequestHistograms::observe(const RequestPhases& p, int64_t prompt, int64_t generated, int64_t max) {
  if (!p.scheduled) return;
  queue.observe(seconds(*p.scheduled - p.queued));
  prompt_tokens.observe(static_cast<double>(prompt));
  generation_tokens.observe(static_cast<double>(generated));
  max_tokens.observe(static_cast<double>(max));
  if (!p.first_token) return;  // ended before its first token: no prefill, decode or inference phase
  const auto last = p.last_token.value_or(*p.first_token);
  prefill.observe(seconds(*p.first_token - *p.scheduled));
  decode.observe(seconds(last - *p.first_token));
  inference.observe(seconds(last - *p.scheduled));
  if (generated > 1) time_per_output_token.observe(seconds(last - *p.first_token) / static_cast<double>(generated - 1));
}

void RequestHistograms::merge(const RequestHistograms& o) {
  using R = RequestHistograms;
  for (Histogram R::*h : {&R::queue, &R::prefill, &R::decode, &R::inference, &R::time_per_output_token,
                          &R::prompt_tokens, &R::generation_tokens, &R::max_tokens})
    (this->*h).merge(o.*h);
}

}  // namespace dsv4
