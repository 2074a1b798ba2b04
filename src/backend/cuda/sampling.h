// Sampling on the device (backend/op_params.h SampleParams): one CTA per row, fp64 weights through the
// portable exp of backend/sampling_math.h, exact integer masses, radix selection for top-k, top-p and
// the top logprobs. Bit-identical to the CPU backend's tokens and top ids, and reproducible run to run.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/op_params.h"

namespace dsv4::cuda {

// What the device adds to SampleParams: device copies of its host arrays and the kernel's scratch.
struct SampleDeviceArrays {
  const SampleRow* row = nullptr;     // [rows], p.row copied to the device
  const SampleEdit* edits = nullptr;  // p.edits copied to the device (each row's ids ascending)
  double* edited = nullptr;           // [edit_count] scratch: an id's edited logit, at its first edit
  const uint32_t* allow = nullptr;    // p.allow's sets copied to the device, one after another, or null
  uint64_t* word_mass = nullptr;      // [rows, ceil(limit / 32)] scratch
};

// p with device pointers, except row and edits, which the kernel reads from d.
void sample(const SampleParams& p, const SampleDeviceArrays& d, cudaStream_t stream);

}  // namespace dsv4::cuda
