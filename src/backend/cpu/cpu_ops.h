// CpuOps: the CPU backend of Ops. Plain C++ with fp32 accumulation and the reference's exact
// rounding and quantization points, threaded over a ThreadPool. Every output element is computed
// with one fixed order of operations, independent of batch composition and thread count, so results
// are batch-invariant and bit-reproducible run to run.
#pragma once

#include "backend/ops.h"
#include "core/thread_pool.h"

namespace dsv4 {

class CpuOps final : public Ops {
 public:
  // threads <= 0: one per hardware thread.
  explicit CpuOps(int threads = 0);

  int threads() const { return pool_.size(); }

 protected:
  DSV4_OPS_OVERRIDE
 private:
  ThreadPool pool_;
};

}  // namespace dsv4
