// The device ports of glibc's expf, sinf and cosf (glibc_expf.cuh, glibc_sincosf.cuh) against this
// host's libm, bit for bit: the CPU backend's exp, and RoPE's cos/sin (GCC merges them into sincosf).
// A stride through every float, and every float around sinf's switch of argument reduction (120).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/glibc_expf.cuh"
#include "backend/cuda/glibc_sincosf.cuh"

namespace dsv4 {
namespace {

__global__ void eval_kernel(const float* x, int64_t n, float* s, float* c, float* e) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n) return;
  s[i] = cuda::host_sinf(x[i]);
  c[i] = cuda::host_cosf(x[i]);
  e[i] = cuda::host_expf(x[i]);
}

uint32_t bits(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}
float from_bits(uint32_t u) {
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}

std::vector<float> arguments() {
  std::vector<float> x;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 257) {
    const float v = from_bits(static_cast<uint32_t>(u));
    if (!std::isnan(v)) x.push_back(v);
  }
  for (uint32_t u = bits(100.0f); u <= bits(140.0f); u += 3) {
    x.push_back(from_bits(u));
    x.push_back(-from_bits(u));
  }
  return x;
}

template <typename T>
struct DevBuf {
  explicit DevBuf(size_t n) : n(n) { DSV4_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T))); }
  ~DevBuf() { cudaFree(p); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  std::vector<T> get() const {
    std::vector<T> h(n);
    DSV4_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  T* p = nullptr;
  size_t n;
};

TEST(GlibcMath, DevicePortsMatchHostLibm) {
  const std::vector<float> x = arguments();
  const auto n = static_cast<int64_t>(x.size());
  DevBuf<float> dx(x.size()), ds(x.size()), dc(x.size()), de(x.size());
  DSV4_CUDA_CHECK(cudaMemcpy(dx.p, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  eval_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(dx.p, n, ds.p, dc.p, de.p);
  DSV4_CUDA_CHECK(cudaGetLastError());
  const auto s = ds.get(), c = dc.get(), e = de.get();
  int64_t bad_sincos = 0, bad_sin = 0, bad_cos = 0, bad_exp = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float v = x[i];
    float hs, hc;
    sincosf(v, &hs, &hc);
    const float he = std::exp(v);
    const bool sc_bad = std::isfinite(v) && (bits(hs) != bits(s[i]) || bits(hc) != bits(c[i]));
    const bool e_bad = std::isnan(he) ? !std::isnan(e[i]) : bits(he) != bits(e[i]);
    if ((sc_bad || e_bad) && bad_sincos + bad_exp == 0)
      ADD_FAILURE() << std::hexfloat << "x " << v << ": host sin " << hs << " cos " << hc << " exp " << he
                    << ", device " << s[i] << " " << c[i] << " " << e[i];
    bad_sincos += sc_bad;
    bad_exp += e_bad;
    if (std::isfinite(v)) {
      bad_sin += bits(std::sin(v)) != bits(s[i]);
      bad_cos += bits(std::cos(v)) != bits(c[i]);
    }
  }
  EXPECT_EQ(bad_sincos, 0) << "of " << n;
  EXPECT_EQ(bad_sin, 0);
  EXPECT_EQ(bad_cos, 0);
  EXPECT_EQ(bad_exp, 0);
}

}  // namespace
}  // namespace dsv4
