// CudaOps: the CUDA backend of Ops. Every op validates its parameters on the host (op_checks.h),
// then enqueues kernels on the device's stream and returns without waiting: a forward is one stream
// of kernels with no host synchronisation until its logits are copied back. Index contents live on
// the device and are checked there (device_error.h's error flag, raised at the next copy back). Kernels
// take the op's parameter struct as it is, plus what the device adds (the stream, the error flag, RoPE
// frequency tables).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "backend/cuda/cuda_device.h"
#include "backend/ops.h"

namespace dsv4::cuda {

class GemmRunner;
class MoeRunner;
struct GemmPolicy;

class CudaOps final : public Ops {
 public:
  CudaOps(CudaDevice& dev, const GemmPolicy& gemm);
  ~CudaOps() override;

  uint64_t scratch_epoch() const override;
  int64_t step_workspace_bytes(const ModelConfig& model, int64_t tokens) const override;
  int64_t optional_workspace_bytes(const ModelConfig& model) const override;
  void grant_optional_workspace(int64_t bytes) override;

 protected:
  DSV4_OPS_OVERRIDE
 private:
  // The GEMM runner of the stream work goes to now (their scratch is per stream).
  GemmRunner& gemm();
  // The RoPE frequencies of a config, uploaded once.
  const float* frequencies(const RopeConfig& rope);

  CudaDevice& dev_;
  std::unique_ptr<GemmRunner> gemm_;       // main stream
  std::unique_ptr<GemmRunner> side_gemm_;  // side stream (Device::begin_side)
  std::unique_ptr<MoeRunner> moe_;         // main stream only
  std::map<std::tuple<int, double, int64_t, double, double, double>, DeviceArray<float>> freqs_;
  DeviceArray<int32_t> hc_counters_;  // hc_post_pre's per-token counts (zero between its calls)
};

}  // namespace dsv4::cuda
