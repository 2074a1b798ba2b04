// PrefillPacer: how many prefill tokens a step may carry while decodes run (the kLatency chunk policy),
// learned from the measured time of every step, so that no backend needs tuning.
//
// Target: a step with prefill costs at most max((1 + slack) x a decode-only step, target). Measurements:
//   decode step  a moving average of the time of steps that ran only decodes;
//   extra        what a mixed step took beyond it.
// After each mixed step the chunk moves towards chunk x (allowed extra / extra), damped. With an
// extra cost of fixed + per_token x chunk (a chunk is one more sequence in the batch, so it has a fixed
// part) this converges to the largest chunk within the target, with no model of the cost to fit.
// Before the first mixed step the chunk starts where the latest prefill-only step of at least
// kSeedMinTokens puts it (a burst's first prompt runs alone: its step says what a token costs), at
// kSeedShare of the allowed extra; with no such step it starts at one token and at most doubles per
// step. Shorter prompts say little: their tokens attend over short prefixes, so a later prompt's chunk
// costs more a token than theirs did (on the CPU, 32-token prompts seeded a 1024-token prompt's first
// chunk 23% over the target).
// The decode step is re-measured now and then (wants_decode_only_step), since the running batch changes.
#pragma once

#include <cstdint>

namespace dsv4 {

class PrefillPacer {
 public:
  static constexpr int64_t kRemeasureSteps = 64;  // steps between decode-only measurements
  // The share of the allowed extra a seeded first chunk may take: a prefill-only step's cost a token
  // leaves out the decodes' share of a mixed step (one more sequence, longer rows), so it falls short.
  static constexpr double kSeedShare = 0.75;
  static constexpr int64_t kSeedMinTokens = 512;

  // slack: the extra time allowed over a decode-only step, as a fraction of it; target_seconds: a step
  // time always allowed (0: none).
  explicit PrefillPacer(double slack, double target_seconds = 0) : slack_(slack), target_(target_seconds) {}

  void observe(int64_t decode_tokens, int64_t prefill_tokens, double seconds);
  // Prefill tokens for the next step with decodes (at least 1, so prefills always progress).
  int64_t chunk() const;
  // The decode-step estimate is missing or old: run the next step with decodes but no prefill.
  bool wants_decode_only_step() const { return decode_ <= 0 || since_decode_only_ >= kRemeasureSteps; }

  double decode_step_seconds() const { return decode_; }

 private:
  static constexpr double kAlpha = 0.25;  // weight of the newest decode-only step
  double allowed_extra() const;
  // Before any mixed step: the chunk the prefill-only steps' cost a token allows.
  void seed();

  double slack_;
  double target_;
  double decode_ = 0;
  double chunk_ = 1;
  double prefill_token_ = 0;  // seconds a token of the latest prefill-only step (0: none yet)
  bool mixed_seen_ = false;   // a mixed step has steered the chunk: the seed no longer applies
  int64_t since_decode_only_ = 0;
};

}  // namespace dsv4
