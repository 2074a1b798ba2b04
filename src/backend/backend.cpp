#include "backend/backend.h"

#include <fmt/format.h>

#include <string_view>

#include "backend/cpu/cpu_ops.h"
#include "core/env.h"
#include "core/error.h"
#ifdef DSV4_HAVE_CUDA
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/gemm.h"
#endif

namespace dsv4 {
namespace {

Backend cpu_backend(int threads) {
  Backend b;
  b.name = "cpu";
  b.device = std::make_unique<HostDevice>();
  auto ops = std::make_unique<CpuOps>(threads);
  b.description = fmt::format("cpu: {} threads", ops->threads());
  b.ops = std::move(ops);
  return b;
}

#ifdef DSV4_HAVE_CUDA
// DSV4_GEMM=cublaslt opts into cuBLASLt's tensor-core GEMMs (much faster prefill, but not faithful to
// the reference's rounding: see cuda/gemm.h); the default is the exact kernels.
cuda::GemmPrecision gemm_precision() {
  return env_switch("DSV4_GEMM") == "cublaslt" ? cuda::GemmPrecision::kCublasLt : cuda::GemmPrecision::kExact;
}

Backend cuda_backend() {
  Backend b;
  b.name = "cuda";
  auto dev = std::make_unique<cuda::CudaDevice>(0);
  const cuda::GemmPrecision gemm = gemm_precision();
  b.description = fmt::format("cuda: {} (ordinal {}), GEMMs {}", dev->name(), dev->ordinal(),
                              gemm == cuda::GemmPrecision::kExact ? "exact" : "cuBLASLt (DSV4_GEMM)");
  b.ops = std::make_unique<cuda::CudaOps>(*dev, gemm);
  b.device = std::move(dev);
  return b;
}
#endif

bool have_gpu() {
#ifdef DSV4_HAVE_CUDA
  return cuda::device_count() > 0;
#else
  return false;
#endif
}

}  // namespace

std::vector<std::string> built_backends() {
#ifdef DSV4_HAVE_CUDA
  return {"cuda", "cpu"};
#else
  return {"cpu"};
#endif
}

Backend make_backend(std::string_view name, int cpu_threads) {
  check_env_switches();
  if (name == "auto") name = have_gpu() ? "cuda" : "cpu";
  if (name == "cpu") return cpu_backend(cpu_threads);
  if (name == "cuda") {
#ifdef DSV4_HAVE_CUDA
    DSV4_CHECK(have_gpu(), "backend cuda: no CUDA GPU is visible on this machine (use --backend cpu)");
    return cuda_backend();
#else
    fail("backend cuda: this build has no CUDA backend (nvcc was not found when it was configured)");
#endif
  }
  fail("unknown backend \"{}\" (expected cpu, cuda or auto)", name);
}

}  // namespace dsv4
