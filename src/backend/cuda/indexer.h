// Indexer scores and top-k on the paged index-key cache (MODEL.md §5.6), as backend/cpu/indexer.cpp
// computes them, bit for bit: the contract is backend/ops.h's IndexerTopkParams.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "backend/cuda/device_table.h"

namespace dsv4::cuda {

// IndexerTopkParams restated for the device. All pointers are device memory.
struct IndexerArgs {
  const uint16_t* q = nullptr;        // [tokens, heads, head_dim] bf16, 16-byte aligned; head_dim = 128
  const uint16_t* weights = nullptr;  // [tokens, heads] bf16
  float weight_scale = 0;
  int64_t tokens = 0;
  int heads = 0;  // <= 256
  int head_dim = 0;
  const int32_t* positions = nullptr;  // [tokens]
  int ratio = 4;
  const int32_t* token_seq = nullptr;  // [tokens]; null = sequence 0
  int64_t sequences = 1;
  DeviceTable keys{};                  // kIndexFp4, kIndexFp8 or kBf16
  const int32_t* key_slots = nullptr;  // [sequences, key_stride]
  int32_t key_stride = 0;
  const int32_t* key_count = nullptr;  // [sequences]
  int topk = 0;                        // <= 2048
  int32_t* out_index = nullptr;        // [tokens, topk]
  const int32_t* slot_map = nullptr;   // optional [sequences, key_stride]
  int32_t* out_slots = nullptr;        // optional [tokens, topk], with slot_map
  // Optional bound on any token's eligible keys, known to the caller (0 = key_stride): sizes the scratch.
  // A token with more eligible keys records kIndexerSlot and is cut to the bound.
  int32_t max_keys = 0;
  int32_t* err = nullptr;  // DeviceError::kIndexerSlot: bad slot (score −inf), sequence id or key count
};

// Scores every eligible key into stream-ordered scratch (tokens in groups so that it stays <= 256 MiB),
// register-blocked over keys and heads with the CPU's exact fp32 order, with a histogram of the score
// keys; then per token the radix cut at the top-k, a compaction over chunks of the row (one CTA each)
// and, by the last CTA, the sorted output. Deterministic; no host synchronisation.
void indexer_topk(const IndexerArgs& a, cudaStream_t stream);

// Benchmarks and tests only: indexer_topk's two halves on a scratch this object keeps, so that each can
// be timed alone. score() runs the scoring kernel with its histograms (what indexer_topk launches first);
// select() the cut, compaction and sorted output from the last score() (what it launches next), so
// score() then select() gives indexer_topk's output. The tokens must fit one token group (throws else).
class IndexerSplit {
 public:
  IndexerSplit(const IndexerArgs& a, cudaStream_t stream);
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
