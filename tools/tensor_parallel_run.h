// A command's model on a replica's tensor-parallel ranks (golden-check, bench step): one thread a rank,
// each with its own backend made like the command's and its ModelShard over a host communicator (the CPU
// backend; the engine's ranks are engine/tensor_parallel_ranks.h).
#pragma once

#include <functional>

#include "backend/backend.h"
#include "model/model_shard.h"

namespace dsv4::tools {

// Runs fn(rank's backend, its shard) on every rank at once and returns when all are done; the first
// error is rethrown (a rank that fails stops the others). `threads`: the command's --threads, shared.
void run_tensor_parallel(const char* command, const ParallelLayout& layout, const Backend& like, int threads,
                         const std::function<void(Backend&, const ModelShard&)>& fn);

}  // namespace dsv4::tools
