#include "sched/prefill_pacer.h"

#include <algorithm>
#include <cmath>

namespace dsv4 {

double PrefillPacer::allowed_extra() const { return std::max(slack_ * decode_, target_ - decode_); }

void PrefillPacer::seed() {
  if (mixed_seen_ || decode_ <= 0 || prefill_token_ <= 0) return;
  chunk_ = std::clamp(kSeedShare * allowed_extra() / prefill_token_, 1.0, 1e9);
}

void PrefillPacer::observe(int64_t decode_tokens, int64_t prefill_tokens, double seconds) {
  if (!(seconds > 0)) return;
  if (decode_tokens == 0) {  // prefill-only steps say what a token costs, not what the target allows
    if (prefill_tokens >= kSeedMinTokens) prefill_token_ = seconds / static_cast<double>(prefill_tokens);
    seed();
    return;
  }
  if (prefill_tokens == 0) {
    decode_ = decode_ > 0 ? decode_ + kAlpha * (seconds - decode_) : seconds;
    since_decode_only_ = 0;
    seed();
    return;
  }
  ++since_decode_only_;
  if (decode_ <= 0) return;
  // Damped (square root) and bounded (x1/2 .. x2) so that one noisy step cannot swing the chunk.
  const double extra = std::max(seconds - decode_, 1e-3 * decode_);
  const double factor = std::clamp(std::sqrt(allowed_extra() / extra), 0.5, 2.0);
  if (prefill_tokens >= chunk()) {
    chunk_ = std::clamp(chunk_ * factor, 1.0, 1e9);
    mixed_seen_ = true;
  } else if (factor < 1) {
    // A short chunk (a prompt's remainder) that still ran over: evidence for smaller chunks only.
    chunk_ = std::max(1.0, std::min(chunk_, static_cast<double>(prefill_tokens) * factor));
    mixed_seen_ = true;
  }
}

int64_t PrefillPacer::chunk() const { return std::max<int64_t>(1, static_cast<int64_t>(chunk_)); }

}  // namespace dsv4
