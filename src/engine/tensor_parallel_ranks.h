// TensorParallelRanks: the ranks of an engine's model beyond the first, when its layout has several
// tensor-parallel ranks (model/parallel_layout.h). The ModelRunner's own model is rank 0. Each other
// rank is a thread with its own backend, its own pools of the cache manager's layout (so every rank
// holds the whole KV, written at the manager's slots) and its Model with its shard; a step runs on
// all of them at once, and only rank 0's logits are sampled. Ranks are threads of one process over the
// host communicator: the CPU backend (docs/architecture.md, "Several GPUs").
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/comm/host_communicator.h"
#include "kv/kv_cache_manager.h"
#include "model/forward_batch.h"
#include "model/model.h"
#include "model/paged_kv.h"

namespace dsv4 {

class TensorParallelRanks {
 public:
  // `like` is rank 0's backend: the others are made the same way with `threads` each.
  TensorParallelRanks(const ModelConfig& cfg, const ModelWeights& weights, const KvCacheManager& manager,
                      KvFormats formats, const ParallelLayout& layout, const Backend& like, int threads);
  ~TensorParallelRanks();
  TensorParallelRanks(const TensorParallelRanks&) = delete;
  TensorParallelRanks& operator=(const TensorParallelRanks&) = delete;

  // Rank 0's place: the layout and its communicator (for the ModelRunner's model).
  ModelShard rank0_shard() const;

  // Runs the batch on ranks 1.. (their sequence i bound to requests[i]) while `here` runs rank 0 on the
  // calling thread; returns when all are done. A rank's error aborts the communicators, so every rank
  // stops, and the first error is rethrown.
  void step(const ForwardBatch& batch, std::span<const KvRequestId> requests, const std::function<void()>& here);

 private:
  struct Rank;
  void serve(Rank& r);

  ParallelLayout layout_;
  std::vector<std::unique_ptr<HostCommunicator>> comms_;  // [tp]
  std::vector<std::unique_ptr<Rank>> ranks_;              // ranks 1..tp-1
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t generation_ = 0;  // one per step
  int pending_ = 0;
  bool stop_ = false;
  const ForwardBatch* batch_ = nullptr;
  std::span<const KvRequestId> requests_;
  std::exception_ptr error_;
};

}  // namespace dsv4
