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

  // This rank's steps meet peers in collectives (TP gathers, the expert exchange): they run eagerly,
  // since the staged communicator cannot be recorded and the exchange's counts come to the host. A
  // data-parallel replica without expert parallelism holds the whole model and meets no one.
  bool meets_peers() const { return layout.config.tp > 1 || layout.ep_size > 1; }
};

}  // namespace dsv4
