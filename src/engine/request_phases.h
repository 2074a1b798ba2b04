// vLLM's request-level histograms, measured where the phases are known: in the engine. A request is
// queued when the engine takes it, scheduled at its first step, then gets its first and last tokens.
// queue = scheduled - queued, prefill = first token - scheduled, decode = last - first token,
// inference = last token - scheduled (vLLM's definitions; a preempted request keeps its first scheduled
// time, as in vLLM). Token counts use vLLM's 1-2-5 buckets up to max_model_len.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

#include "core/histogram.h"

namespace dsv4 {

struct RequestPhases {
  using Clock = std::chrono::steady_clock;
  Clock::time_point queued;
  std::optional<Clock::time_point> scheduled, first_token, last_token;
};

struct RequestHistograms {
  Histogram queue, prefill, decode, inference, time_per_output_token;
  Histogram prompt_tokens, generation_tokens, max_tokens;

  explicit RequestHistograms(int64_t max_model_len = 1);
  // One ended request. A request never scheduled (aborted while waiting) has no phases to report.
  void observe(const RequestPhases& p, int64_t prompt_tokens, int64_t generation_tokens, int64_t max_tokens);
  void merge(const RequestHistograms& o);
};

}  // namespace dsv4
