// A rank's weights under a ParallelLayout: views into the full weights (no copies), each split weight
// narrowed to the rank's rows, routed experts the rank does not own left empty. PlacedWeights then
// places only what a rank holds (it skips empty views).
#pragma once

#include "model/parallel_layout.h"
#include "model/weights.h"

namespace dsv4 {

// Rows [r.begin, r.end) of W [out, in] in its storage format; FP8 slices start on a 128-row scale block.
LinearWeight weight_rows(const LinearWeight& w, RowRange r);

// The views rank `rank` computes with. One rank of one: the full weights.
ModelWeights shard_weights(const ModelWeights& full, const ModelConfig& cfg, const ParallelLayout& layout, int rank);

}  // namespace dsv4
