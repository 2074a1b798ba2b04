// The device ports of glibc's expf, sinf, cosf and log1pf (glibc_expf.cuh, glibc_sincosf.cuh,
// glibc_log1pf.cuh) against this host's libm, bit for bit: the CPU backend's exp, RoPE's cos/sin (GCC
// merges them into sincosf) and the MoE gate's log1p. A stride through every float, and every float
// around sinf's switch of argument reduction (120) and around log1pf's branch points.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/glibc_expf.cuh"
#include "backend/cuda/glibc_log1pf.cuh"
#include "backend/cuda/glibc_sincosf.cuh"
#include "gpu/gpu_test_util.h"

namespace dsv4 {
namespace {

using gputest::Dev;

__global__ void eval_kernel(const float* x, int64_t n, float* s, float* c, float* e) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n) return;
  s[i] = cuda::host_sinf(x[i]);
  c[i] = cuda::host_cosf(x[i]);
  e[i] = cuda::host_expf(x[i]);
}

__global__ void log1p_kernel(const float* x, int64_t n, float* l) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < n) l[i] = cuda::host_log1pf(x[i]);
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

// log1pf: a stride through every float (NaNs too: the port reproduces their bits), every 31st float
// in (0, 4.9e8] (the gate's log1p(exp(z)) for z <= 20), every float near log1pf's thresholds
// (-1, -0.2929, 0.41422, 2^-54, 2^-29, 2^53) and near 2^k - 1 (f = 0 after its reduction).
std::vector<float> log1p_arguments() {
  std::vector<float> x;
  for (uint64_t u = 0; u < (uint64_t{1} << 32); u += 257) x.push_back(from_bits(static_cast<uint32_t>(u)));
  for (uint32_t u = 1; u <= bits(4.9e8f); u += 31) x.push_back(from_bits(u));
  const auto around = [&x](float v) {
    for (int d = -4096; d <= 4096; ++d)
      x.push_back(from_bits(static_cast<uint32_t>(static_cast<int64_t>(bits(v)) + d)));
  };
  for (const uint32_t t :
       {0xbf800000u, 0xbe95f61fu, 0x3ed413d7u, 0x24800000u, 0xa4800000u, 0x31000000u, 0xb1000000u, 0x5a000000u})
    around(from_bits(t));
  for (int k = 1; k < 64; ++k) around(std::ldexp(1.0f, k) - 1.0f);
  for (int k = 1; k < 25; ++k) around(std::ldexp(1.0f, -k) - 1.0f);
  return x;
}

TEST(GlibcMath, DevicePortsMatchHostLibm) {
  const std::vector<float> x = arguments();
  const auto n = static_cast<int64_t>(x.size());
  const std::vector<float> zeros(x.size());
  Dev<float> dx(x), ds(zeros), dc(zeros), de(zeros);
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

TEST(GlibcMath, DeviceLog1pfMatchesHostLibm) {
  const std::vector<float> x = log1p_arguments();
  const auto n = static_cast<int64_t>(x.size());
  Dev<float> dx(x), dl(std::vector<float>(x.size()));
  log1p_kernel<<<static_cast<unsigned>((n + 255) / 256), 256>>>(dx.p, n, dl.p);
  DSV4_CUDA_CHECK(cudaGetLastError());
  const auto l = dl.get();
  int64_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float h = log1pf(x[i]);
    if (bits(h) == bits(l[i])) continue;
    if (bad++ == 0) ADD_FAILURE() << std::hexfloat << "x " << x[i] << ": host log1pf " << h << ", device " << l[i];
  }
  EXPECT_EQ(bad, 0) << "of " << n;
}

}  // namespace
}  // namespace dsv4
