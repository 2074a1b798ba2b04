// Indexer scores and top-k on the paged index-key cache (MODEL.md §5.6), as backend/cpu/indexer.cpp
// computes them, bit for bit (dots kCudaCores: the exact tier). With kWgmma or kMmaSync (spec/NUMERICS.md's
// fast tier) the dots of FP4 keys with at most 64 heads run on the bf16 tensor cores with fp32 accumulators
// and the head sum in another fixed order (kWgmma: on the tensor cores too); the rounding points, the
// selection and its ties stay. The contract is
// backend/op_params.h's IndexerTopkParams, taken with device pointers (q 16-byte aligned, head_dim 128, heads <= 256,
// topk <= 2048; keys kIndexFp4, kIndexFp8 or kBf16). What the device adds: err, the device error flag (kIndexerSlot: a
// bad slot, whose score is −inf, sequence id or key count), and max_keys, an optional bound on any token's eligible
// keys known to the caller (0 = key_stride) that sizes the scratch; a token with more eligible keys records
// kIndexerSlot and is cut to the bound.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "backend/cuda/device_error.h"
#include "backend/cuda/gemm/gemm_plan.h"
#include "backend/op_params.h"

namespace dsv4::cuda {

// Scores every eligible key into stream-ordered scratch (tokens in groups so that it stays <= 256 MiB),
// register-blocked over keys and heads with the CPU's exact fp32 order, with a histogram of the score
// keys; then per token the radix cut at the top-k, a compaction over chunks of the row (one CTA each)
// and, by the last CTA, the sorted output. Deterministic; no host synchronisation.
void indexer_topk(const IndexerTopkParams& p, int32_t* err, IndexerDots dots, cudaStream_t stream,
                  int32_t max_keys = 0);

// Benchmarks and tests only: indexer_topk's two halves on a scratch this object keeps, so that each can
// be timed alone. score() runs the scoring kernel with its histograms (what indexer_topk launches first);
// select() the cut, compaction and sorted output from the last score() (what it launches next), so
// score() then select() gives indexer_topk's output. The tokens must fit one token group (throws else).
class IndexerSplit {
 public:
  IndexerSplit(const IndexerTopkParams& p, int32_t* err, IndexerDots dots, cudaStream_t stream, int32_t max_keys = 0);
  ~IndexerSplit();
  IndexerSplit(const IndexerSplit&) = delete;
  IndexerSplit& operator=(const IndexerSplit&) = delete;
  void score();
  void select();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace dsv4::cuda
