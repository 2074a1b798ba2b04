// ModelShard: one rank's place in a model run over several ranks (model/parallel_layout.h) and the
// communicators it exchanges activations through. The default is one rank holding everything.
#pragma once

#include "backend/comm/communicator.h"
#include "model/parallel_layout.h"

namespace dsv4 {

struct ModelShard {
  ParallelLayout layout;          // plan_parallel(cfg, {}) for one rank
  int rank = 0;                   // in the whole run: dp_rank x tp + tp_rank
  Communicator* tp = nullptr;     // the tensor-parallel ranks of this rank's replica (may be null when tp == 1)
  Communicator* world = nullptr;  // every rank, for expert dispatch (may be null without expert parallelism)

  bool sharded() const { return layout.config.world() > 1; }
};

}  // namespace dsv4
