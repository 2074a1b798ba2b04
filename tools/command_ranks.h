// A command's ranks (golden-check, bench step, bench comm): every rank of a layout at once, a thread
// each, making its own backend like the command's on its GPU and meeting its peers through its
// replica's tensor-parallel group and the group of every rank (backend/rank_group.h: the host
// communicator on the CPU, NCCL or host-staged collectives on GPUs). The engine's ranks are
// engine/replica_ranks.h.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string_view>

#include "backend/backend.h"
#include "backend/comm/communicator.h"
#include "backend/rank_group.h"
#include "model/model_shard.h"

namespace dsv4::tools {

struct RankContext {
  int rank = 0;        // dp_rank x tp + tp_rank
  int local_rank = 0;  // among this host's ranks
  Backend& backend;
  Communicator& tp;     // the rank's replica
  Communicator& world;  // every rank

  // The rank's shard of a model in `layout`.
  ModelShard shard(const ParallelLayout& layout) const {
    return ModelShard{layout, rank, &tp, layout.ep_size > 1 ? &world : &tp};
  }
};

struct CommandRanks {
  ParallelConfig parallel;
  std::string_view backend;          // as make_backend takes it
  std::optional<Numerics> numerics;  // the backend's default when empty
  int threads = 0;                   // the command's --threads, shared by the ranks
  NodeConfig nodes;                  // the hosts (--nnodes ...): this process runs its host's ranks
  std::chrono::milliseconds timeout = std::chrono::minutes(10);
};

// Runs fn on this host's ranks and returns when all are done. A rank that fails aborts its
// communicators, so its peers stop too, and the first error is rethrown.
void run_command_ranks(const CommandRanks& ranks, const std::function<void(RankContext&)>& fn);

}  // namespace dsv4::tools
