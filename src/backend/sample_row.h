// One row of the sample op's math (backend/op_params.h SampleParams): the reference of that math, run
// by the CPU backend's sample op and by the engine's host sampler (engine/sampler.cpp), so it exists
// once, outside any backend.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/op_params.h"

namespace dsv4 {

// The host side of one sample op call (SampleParams): a row per request with its edits and allow-set.
struct SampleInputs {
  std::vector<SampleRow> rows;
  std::vector<SampleEdit> edits;
  std::vector<const uint32_t*> allow;  // the rows' allow-sets (ceil(limit / 32) words each), where they lie

  void clear() {
    rows.clear();
    edits.clear();
    allow.clear();
  }
};

// Buffers reused from row to row.
struct SampleScratch {
  std::vector<double> z;        // edited logits of the ids below the limit
  std::vector<double> w;        // their weights
  std::vector<int32_t> ids;     // surviving candidates
  std::vector<uint32_t> order;  // raw-logit keys, for the top logprobs
};

// One row: x holds at least `limit` logits, `edits` are the row's own, `allow` its allow-set (null: every
// id). Returns the token (row.force_id when set); writes *logprob and *rank (each when not null) and
// top_id/top_logprob[0..top_width) as SampleParams describes.
int32_t sample_row(const float* x, int64_t limit, const SampleRow& row, std::span<const SampleEdit> edits,
                   const uint32_t* allow, SampleScratch& s, double* logprob, int32_t* top_id, double* top_logprob,
                   int32_t top_width, int64_t* rank = nullptr);

}  // namespace dsv4
