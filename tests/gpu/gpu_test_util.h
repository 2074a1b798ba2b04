// Helpers of the GPU parity tests: device copies of host vectors, random inputs.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_error.h"
#include "core/kv_entry.h"
#include "core/number_formats.h"

namespace dsv4::gputest {

// The bit patterns of fp32 values (compares NaNs and signed zeros as bits).
inline std::vector<uint32_t> bits(const std::vector<float>& v) {
  std::vector<uint32_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = std::bit_cast<uint32_t>(v[i]);
  return b;
}

// A device copy of a host vector; get() synchronizes and copies it back.
template <typename T>
struct Dev {
  explicit Dev(const std::vector<T>& h) : n(h.size()) {
    DSV4_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T)));
    DSV4_CUDA_CHECK(cudaMemcpy(p, h.data(), n * sizeof(T), cudaMemcpyHostToDevice));
  }
  ~Dev() { cudaFree(p); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  std::vector<T> get() const {
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> h(n);
    DSV4_CUDA_CHECK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
  }
  T* p = nullptr;
  size_t n;
};

inline float as_float(uint16_t bf16) { return bf16_to_float(bf16); }
inline float as_float(float v) { return v; }

// rms(got - want) / rms(want) of bf16 or fp32 outputs; NaN anywhere fails.
template <typename T>
double normalized_error(const std::vector<T>& got, const std::vector<T>& want) {
  double d = 0, r = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double g = as_float(got[i]), w = as_float(want[i]);
    if (std::isnan(g)) return INFINITY;
    d += (g - w) * (g - w);
    r += w * w;
  }
  return r > 0 ? std::sqrt(d / r) : std::sqrt(d);
}

// calc_diff(x, y) = 1 − 2·Σxy / Σ(x² + y²) (spec/NUMERICS.md).
inline double calc_diff(const std::vector<float>& x, const std::vector<float>& y) {
  double xy = 0, xx = 0;
  for (size_t i = 0; i < x.size(); ++i) xy += double{x[i]} * y[i], xx += double{x[i]} * x[i] + double{y[i]} * y[i];
  return xx > 0 ? 1.0 - 2.0 * xy / xx : 0.0;
}

// Normal(0, scale²) values of a seeded generator, as fp32 or rounded to bf16.
inline std::vector<float> random_f32(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}
inline std::vector<uint16_t> random_bf16(size_t n, uint32_t seed, float scale = 1.0f) {
  const std::vector<float> f = random_f32(n, seed, scale);
  std::vector<uint16_t> v(n);
  std::transform(f.begin(), f.end(), v.begin(), float_to_bf16);
  return v;
}

// The device twin of a host table whose bytes were copied to `base`.
inline EntryTable device_table(const EntryTable& t, uint8_t* base) {
  EntryTable d = t;
  d.base = base;
  return d;
}

}  // namespace dsv4::gputest
