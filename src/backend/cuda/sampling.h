// Sampling on the device (backend/ops.h SampleParams): one CTA per row, fp64 weights through the portable
// exp of backend/sampling_math.h, exact integer masses, radix selection for top-k, top-p and the top
// logprobs. Bit-identical to the CPU backend's tokens and top ids, and reproducible run to run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/sampling_math.h"

namespace dsv4::cuda {

struct SampleArgs {
  const float* x = nullptr;  // [rows, cols]
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t limit = 0;
  const SampleRow* row = nullptr;     // [rows], device memory
  const SampleEdit* edits = nullptr;  // device memory, each row's ids ascending
  double* edited = nullptr;           // [edits] scratch: an id's edited logit, at its first edit
  const uint32_t* allow = nullptr;    // [allow rows, ceil(limit / 32)] device memory: the rows' allow-sets
  uint64_t* word_mass = nullptr;      // [rows, ceil(limit / 32)] scratch
  int32_t* token = nullptr;           // [rows]
  double* logprob = nullptr;          // [rows] or null
  int32_t top_width = 0;
  int32_t* top_id = nullptr;      // [rows, top_width]
  double* top_logprob = nullptr;  // [rows, top_width]
};

void sample(const SampleArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
