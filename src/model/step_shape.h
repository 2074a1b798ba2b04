// StepShape: the padded form of a decode-only step. Steps of one shape issue the same work with the same
// sizes and, through a StepArena, the same index-array addresses, so a device can record one and replay
// it (model/step_graphs.h). The batch is rounded up to a bucket and filled with shadow slices (slice
// 0's token again, writing no KV); the lists that grow with the context are widened to a bucket; every
// compressor gets one emission item per token (block −1 where the token completes none).
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "core/model_config.h"
#include "model/forward_batch.h"

namespace dsv4 {

// How the model runs decode-only steps: eagerly as given; padded to their StepShape (the same work as
// recorded steps, on any device); or recorded once per shape and replayed (CUDA graphs; a device that
// cannot record runs them padded).
enum class StepMode : uint8_t { kEager, kPadded, kGraphs };
const char* step_mode_name(StepMode mode);                       // "eager", "padded", "graphs"
std::optional<StepMode> parse_step_mode(std::string_view name);  // nothing for another name

// What the model's recorded steps did so far (model/step_graphs.h).
struct StepGraphStats {
  int64_t eager = 0;     // warm-up steps (and steps of shapes that failed)
  int64_t recorded = 0;  // recordings made (each also ran its step)
  int64_t replayed = 0;  // steps replayed from a recording
  int64_t dropped = 0;   // recordings dropped as stale or evicted
  int64_t failed = 0;    // shapes that failed to record or replay
  // The host's time in the last step run through the graphs (ms): building its index (the device page
  // maps' sync and the one upload included), and launching its recording (0 where it ran eagerly).
  double index_ms = 0;
  double launch_ms = 0;
  double sync_ms = 0;        // of index_ms: the device page maps' and block tables' sync
  double upload_ms = 0;      // of index_ms: the one upload
  int64_t upload_bytes = 0;  // of that upload
};

struct StepShape {
  int64_t batch = 0;            // slices after padding
  std::vector<int32_t> widths;  // per distinct compress ratio (ascending): its list width
  auto operator<=>(const StepShape&) const = default;
};

// Batch buckets: 1, 2, 4, then multiples of 8 up to kMaxPaddedBatch; 0 above it (not padded).
constexpr int64_t kMaxPaddedBatch = 256;
int64_t batch_bucket(int64_t slices);

// List widths: 0 stays 0; up to 16 -> 16; else up to a multiple of max(16, an eighth of the next power
// of two): at most a quarter wider, eight shapes per doubling of the context.
int32_t width_bucket(int64_t width);

// The shape of a decode-only batch (every slice one token that wants logits, no shadows, at most
// kMaxPaddedBatch slices), or nothing.
std::optional<StepShape> decode_shape(const ModelConfig& cfg, const ForwardBatch& b);

// `b` with shadow slices of slice 0 appended up to shape.batch.
ForwardBatch pad_batch(const ForwardBatch& b, const StepShape& shape);

}  // namespace dsv4
