// Ops: the interface both backends implement, one method per op of op_params.h. The public front
// checks the parameters (backend/op_checks.h), so every backend gets validated parameters, then calls
// the backend's do_<op>. Adding an op touches op_params.h (its struct and the op list), op_checks.cpp,
// op_trace.cpp (which outputs a trace keeps), the two backends and their tests: swiglu is the smallest.
#pragma once

#include <cstdint>

#include "backend/op_params.h"
#include "backend/rope.h"
#include "core/model_config.h"

namespace dsv4 {

class Ops {
 public:
  virtual ~Ops() = default;

#define DSV4_OP_FRONT(name, P) void name(const P##Params& p);
  DSV4_FOR_EACH_OP(DSV4_OP_FRONT)
#undef DSV4_OP_FRONT

  // Changes whenever scratch memory the ops keep between calls moves (grows, is rebuilt): a device
  // recording (Device::begin_recording) that ran these ops is stale once it differs.
  virtual uint64_t scratch_epoch() const { return 0; }

  // Device memory the backend itself keeps for steps of up to `tokens` tokens of this model, beyond the
  // weights, the KV pools and the model's activations: its GEMM and MoE scratch, library workspaces,
  // the runtime's own. The engine leaves it free when it sizes the KV pools. 0 for host memory.
  virtual int64_t step_workspace_bytes(const ModelConfig& model, int64_t tokens) const {
    (void)model, (void)tokens;
    return 0;
  }
  // Device memory the backend could use beyond that to run faster, the most it would take (the CUDA fast
  // tier: FP4 experts kept re-encoded for cuBLASLt); it takes none until the engine grants some
  // (grant_optional_workspace) out of what its KV pools could never use. Tools without an engine: unbounded.
  virtual int64_t optional_workspace_bytes(const ModelConfig& model) const {
    (void)model;
    return 0;
  }
  virtual void grant_optional_workspace(int64_t bytes) { (void)bytes; }

 protected:
  // The backend's op, given parameters the front has checked.
#define DSV4_OP_VIRTUAL(name, P) virtual void do_##name(const P##Params& p) = 0;
  DSV4_FOR_EACH_OP(DSV4_OP_VIRTUAL)
#undef DSV4_OP_VIRTUAL
};

// The overrides of every op in a backend's class body.
#define DSV4_OP_OVERRIDE(name, P) void do_##name(const P##Params& p) override;
#define DSV4_OPS_OVERRIDE DSV4_FOR_EACH_OP(DSV4_OP_OVERRIDE)

}  // namespace dsv4
