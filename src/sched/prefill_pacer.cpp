#include "sched/prefill_pacer.h"

#include <algorithm>
#include <cmath>

namespace dsv4 {

void PrefillPacer::observe(int64_t decode_tokens, int64_t prefill_tokens, double seconds) {
  if (!(seconds > 0) || decode_tokens == 0) return;  // prefill-only steps say nothing about the target
  if (prefill_tokens == 0) {
    decode_ = decode_ > 0 ? decode_ + kAlpha * (seconds - decode_) : seconds;
    since_decode_only_ = 0;
    return;
  }
  ++since_decode_only_;
  if (decode_ <= 0) return;
  // Damped (square root) and bounded (x1/2 .. x2) so that one noisy step cannot swing the chunk.
  const double extra = std::max(seconds - decode_, 1e-3 * decode_);
  const double allowed = std::max(slack_ * decode_, target_ - decode_);
  const double factor = std::clamp(std::sqrt(allowed / extra), 0.5, 2.0);
  if (prefill_tokens >= chunk()) {
    chunk_ = std::clamp(chunk_ * factor, 1.0, 1e9);
  } else if (factor < 1) {
    // A short chunk (a prompt's remainder) that still ran over: evidence for smaller chunks only.
    chunk_ = std::max(1.0, std::min(chunk_, static_cast<double>(prefill_tokens) * factor));
  }
}

int64_t PrefillPacer::chunk() const { return std::max<int64_t>(1, static_cast<int64_t>(chunk_)); }

}  // namespace dsv4
