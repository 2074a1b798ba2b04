#include "model/step_shape.h"

#include <algorithm>
#include <bit>
#include <set>

#include "core/error.h"

namespace dsv4 {

const char* step_mode_name(StepMode mode) {
  switch (mode) {
    case StepMode::kEager:
      return "eager";
    case StepMode::kPadded:
      return "padded";
    case StepMode::kGraphs:
      return "graphs";
  }
  return "?";
}

std::optional<StepMode> parse_step_mode(std::string_view name) {
  for (const StepMode m : {StepMode::kEager, StepMode::kPadded, StepMode::kGraphs})
    if (name == step_mode_name(m)) return m;
  return std::nullopt;
}

int64_t batch_bucket(int64_t slices) {
  if (slices <= 0 || slices > kMaxPaddedBatch) return 0;
  if (slices <= 2) return slices;
  if (slices <= 4) return 4;
  return (slices + 7) / 8 * 8;
}

int32_t width_bucket(int64_t width) {
  if (width <= 0) return 0;
  if (width <= 16) return 16;
  const int64_t q = std::max<int64_t>(16, static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(width))) / 8);
  return static_cast<int32_t>((width + q - 1) / q * q);
}

std::optional<StepShape> decode_shape(const ModelConfig& cfg, const ForwardBatch& b) {
  StepShape shape;
  shape.batch = batch_bucket(static_cast<int64_t>(b.seqs.size()));
  if (shape.batch == 0) return std::nullopt;
  int64_t last = 0;  // the furthest position of the step
  for (const SequenceSlice& s : b.seqs) {
    if (s.count != 1 || !s.logits || s.shadow) return std::nullopt;
    last = std::max(last, s.start);
  }
  std::set<int> ratios;
  for (int l = 0; l < cfg.n_layers; ++l)
    if (cfg.compress_ratio(l) > 0) ratios.insert(cfg.compress_ratio(l));
  for (const int m : ratios) shape.widths.push_back(width_bucket((last + 1) / m));
  return shape;
}

ForwardBatch pad_batch(const ForwardBatch& b, const StepShape& shape) {
  DSV4_CHECK(!b.seqs.empty() && static_cast<int64_t>(b.seqs.size()) <= shape.batch,
             "pad_batch: {} slices do not fit a batch of {}", b.seqs.size(), shape.batch);
  ForwardBatch out = b;
  const SequenceSlice first = b.seqs.front();
  while (static_cast<int64_t>(out.seqs.size()) < shape.batch) {
    out.add(first.seq, first.start, &b.token_ids[static_cast<size_t>(first.offset)], 1, true);
    out.seqs.back().shadow = true;
  }
  return out;
}

}  // namespace dsv4
