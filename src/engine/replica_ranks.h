// ReplicaRanks: the ranks of one data-parallel replica of an engine's model (model/parallel_layout.h).
// The ModelRunner's own model is the replica's first rank. Each other tensor-parallel rank is a thread
// that makes and owns its backend (on its GPU, backend/rank_group.h), its pools of the cache manager's
// layout (so every rank holds the replica's whole KV, written at the manager's slots) and its Model
// with its shard; a step runs on all of them at once, and only the first rank's logits are sampled.
// Under expert parallelism across replicas every rank also meets the other replicas' ranks in a world
// group, so the replicas step together (idle()). Ranks are threads of one process: over the host
// communicator on the CPU, NCCL or host-staged collectives on GPUs (docs/architecture.md, "Several GPUs").
#pragma once

#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "backend/rank_group.h"
#include "kv/kv_cache_manager.h"
#include "model/forward_batch.h"
#include "model/model.h"
#include "model/paged_kv.h"

namespace dsv4 {

// A replica's place among the data-parallel replicas.
struct ReplicaPlace {
  int index = 0;
  RankPlacement placement;  // which GPU each rank of the run uses, and how a group meets
  // Every rank of every replica, when expert parallelism spans replicas (null otherwise: a replica's
  // tensor-parallel group is then its whole world).
  std::shared_ptr<RankGroup> world;
  std::chrono::milliseconds timeout = std::chrono::minutes(10);  // of the replica's own collectives
};

class ReplicaRanks {
 public:
  // `like` is the first rank's backend: the others are made the same way with `threads` each, each on
  // its own thread and GPU. Returns once every rank is ready; throws the first rank's error that was not.
  ReplicaRanks(const ModelConfig& cfg, const ModelWeights& weights, const KvCacheManager& manager, KvFormats formats,
               const ParallelLayout& layout, ReplicaPlace place, const Backend& like, int threads);
  ~ReplicaRanks();
  ReplicaRanks(const ReplicaRanks&) = delete;
  ReplicaRanks& operator=(const ReplicaRanks&) = delete;

  // The first rank's place: its layout and communicators (for the ModelRunner's model).
  ModelShard first_shard() const;

  // Runs the batch on the other ranks (their sequence i bound to requests[i]) while `here` runs the
  // first rank on the calling thread; returns when all are done. A rank's error aborts the
  // communicators, so every rank stops, and the first error is rethrown.
  void step(const ForwardBatch& batch, std::span<const KvRequestId> requests, const std::function<void()>& here);
  // The same for an idle step (Model::idle_step), `here` being the first rank's.
  void idle(const std::function<void()>& here);

  // With a host tier in `manager`: every other rank gets host pages of the same sizes, and every page
  // copy the manager makes (offloads, restores) is made on each rank at the same offsets of its own
  // pools and pages. The manager must outlive this object's use of it (its copier is put back here).
  void mirror_host_tier(KvCacheManager& manager);

 private:
  struct Rank;
  using Job = std::function<void(Rank&)>;
  struct Recipe;  // what a rank makes itself from
  class MirrorCopier;
  // A rank's thread: makes the rank, reports, serves steps until stopped, then frees what it made.
  void rank_main(Rank& r, const Recipe& recipe);
  void make_rank(Rank& r, const Recipe& recipe);
  void serve(Rank& r);
  void stop_ranks();  // the rank threads end (each freeing what it made) and are joined
  void run(const Job& job, const std::function<void()>& here);
  void abort(size_t local, const std::string& why);

  ParallelLayout layout_;
  int first_ = 0;  // the first rank's number in the world
  std::shared_ptr<RankGroup> tp_group_;
  std::vector<std::unique_ptr<Communicator>> tp_comms_;     // [tp], each made by its rank
  std::vector<std::unique_ptr<Communicator>> world_comms_;  // [tp] when `world` was given
  std::vector<std::unique_ptr<Rank>> ranks_;                // tensor-parallel ranks 1..tp-1
  std::mutex mu_;
  std::condition_variable cv_;
  int ready_ = 0;            // ranks made (or failed to be)
  uint64_t generation_ = 0;  // one per step
  int pending_ = 0;
  bool stop_ = false;
  const Job* job_ = nullptr;
  std::exception_ptr error_;
  std::unique_ptr<KvPageCopier> mirror_;  // installed in mirrored_ in place of first_copier_
  KvCacheManager* mirrored_ = nullptr;
  KvPageCopier* first_copier_ = nullptr;
};

}  // namespace dsv4
