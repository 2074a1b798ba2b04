// CudaOps: the CUDA backend of Ops. Every op validates its parameters on the host (op_checks.h),
// then enqueues kernels on the device's stream and returns without waiting: a forward is one stream
// of kernels with no host synchronisation until its logits are copied back. Index contents live on
// the device and are checked there (device_table.h's error flag, raised at the next copy back).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_device.h"
#include "backend/ops.h"

namespace dsv4::cuda {

class GemmRunner;
class MoeRunner;
struct GemmWeight;
struct IndexerArgs;
struct GemmPolicy;

// The indexer kernel's arguments for an op's parameters (`err`: the device's error flag); shared with
// the benchmark, which times the kernel's halves apart.
IndexerArgs indexer_args(const IndexerTopkParams& p, int32_t* err);

class CudaOps final : public Ops {
 public:
  CudaOps(CudaDevice& dev, const GemmPolicy& gemm);
  ~CudaOps() override;

  uint64_t scratch_epoch() const override;

 protected:
  DSV4_OPS_OVERRIDE
 private:
  // The GEMM runner of the stream work goes to now (their scratch is per stream).
  GemmRunner& gemm();
  // The RoPE frequencies of a config, uploaded once.
  const float* frequencies(const RopeConfig& rope);
  // An expert weight array as GEMM views, converted once per array (the model's arrays never move).
  const GemmWeight* gemm_weights(const Weight* w, int experts);

  CudaDevice& dev_;
  std::unique_ptr<GemmRunner> gemm_;       // main stream
  std::unique_ptr<GemmRunner> side_gemm_;  // side stream (Device::begin_side)
  std::unique_ptr<MoeRunner> moe_;         // main stream only
  std::map<std::tuple<int, double, int64_t, double, double, double>, DeviceArray<float>> freqs_;
  std::map<const Weight*, std::vector<GemmWeight>> expert_views_;
};

}  // namespace dsv4::cuda
