#include "backend/backend.h"

#include <fmt/format.h>

#include <algorithm>
#include <string_view>
#include <thread>

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

Backend cpu_backend(int threads, std::optional<Numerics> numerics) {
  DSV4_CHECK(numerics.value_or(Numerics::kExact) == Numerics::kExact,
             "backend cpu: --numerics fast is not implemented on the CPU, which computes the exact tier only "
             "(use --numerics exact, or --backend cuda for the fast tier)");
  Backend b;
  b.name = "cpu";
  b.numerics = Numerics::kExact;
  b.device = std::make_unique<HostDevice>();
  auto ops = std::make_unique<CpuOps>(threads);
  b.description = fmt::format("cpu: {} threads", ops->threads());
  b.ops = std::move(ops);
  return b;
}

#ifdef DSV4_HAVE_CUDA
Backend cuda_backend(std::optional<Numerics> numerics, int gpu) {
  DSV4_CHECK(gpu >= 0 && gpu < cuda::device_count(), "backend cuda: GPU {} of the {} visible", gpu,
             cuda::device_count());
  Backend b;
  b.name = "cuda";
  b.numerics = numerics.value_or(Numerics::kFast);
  auto dev = std::make_unique<cuda::CudaDevice>(gpu);
  const cuda::GemmPolicy gemm = cuda::GemmPolicy::from_env(b.numerics);
  b.description = fmt::format("cuda: {} (ordinal {}), numerics {}", dev->name(), dev->ordinal(), gemm.describe());
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

Backend make_backend(std::string_view name, int cpu_threads, std::optional<Numerics> numerics, int gpu) {
  check_env_switches();
  if (name == "auto") name = have_gpu() ? "cuda" : "cpu";
  if (name == "cpu") return cpu_backend(cpu_threads, numerics);
  if (name == "cuda") {
#ifdef DSV4_HAVE_CUDA
    DSV4_CHECK(have_gpu(), "backend cuda: no CUDA GPU is visible on this machine (use --backend cpu)");
    return cuda_backend(numerics, gpu);
#else
    fail("backend cuda: this build has no CUDA backend (nvcc was not found when it was configured)");
#endif
  }
  fail("unknown backend \"{}\" (expected cpu, cuda or auto)", name);
}

std::string resolve_backend_name(std::string_view name) {
  if (name == "auto") return have_gpu() ? "cuda" : "cpu";
  return std::string(name);
}

int visible_gpus() {
#ifdef DSV4_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

int cpu_threads_per_rank(int threads, int ranks) {
  if (ranks <= 1) return threads;
  const int all = threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, all / ranks);
}

}  // namespace dsv4
