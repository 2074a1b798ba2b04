// Golden check: replays a golden folder's call pattern (one prefill of P tokens, then N
// teacher-forced one-token decode steps, all B sequences in one batch) and compares the logits
// and each block's output streams with what DeepSeek's reference computed (MODEL.md §2.6).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "backend/device.h"
#include "backend/numerics.h"
#include "backend/ops.h"
#include "model/model_loader.h"
#include "model/model_shard.h"
#include "model/step_shape.h"

namespace dsv4 {

struct GoldenThresholds {
  std::optional<double> max_rms_ratio;
  std::optional<double> min_argmax_agreement;
  std::optional<double> max_block_rms_rel;
};

struct GoldenOptions {
  std::filesystem::path model;
  std::filesystem::path expected;     // default model/expected.safetensors
  std::filesystem::path layers;       // default model/expected_layers.safetensors when it exists
  GoldenThresholds thresholds;        // defaults from model/tolerance.json (missing key: not checked)
  bool blocks = true;                 // run the isolated-block checks when a layers file exists
  std::optional<StepMode> step_mode;  // decode steps; default the model's (graphs where the device records)
  bool side_queues = true;            // the model's side queues where the device has them (false: one queue)
  LoadOptions load;  // --hf-overrides (fewer layers: their blocks are not checked), --load-format dummy (--compare-ops)
};

struct GoldenBlockResult {
  int layer = 0;
  double rms_rel = 0;
};

struct GoldenResult {
  double rms_ratio = 0;
  double argmax_agreement = 0;
  std::vector<GoldenBlockResult> blocks;
  GoldenThresholds thresholds;
  bool pass = false;
  std::vector<std::string> failures;  // one line per missed threshold
};

// Loads tolerance.json of a golden folder (absent file: nothing checked): the top-level keys for the
// exact tier, the `fast` object's for the fast tier (spec/NUMERICS.md; a file without one fails).
GoldenThresholds load_thresholds(const std::filesystem::path& file, Numerics tier = Numerics::kExact);

GoldenResult run_golden_check(const GoldenOptions& opts, Ops& ops, Device& dev);
// One rank of a sharded model (model/model_shard.h): every rank of the run calls it at once with its
// own ops and device; each gets the figures of the whole model.
GoldenResult run_golden_check(const GoldenOptions& opts, Ops& ops, Device& dev, const ModelShard& shard);

}  // namespace dsv4
