#include "backend/cpu/norms.h"

#include <cmath>

#include "backend/cpu/cpu_support.h"

namespace dsv4::cpu {

void rms_norm_row(const float* x, const float* w, int64_t n, float eps, float* y) {
  const float var = sum_squares(x, n) / static_cast<float>(n);
  const float r = 1.0f / std::sqrt(var + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = w[i] * (x[i] * r);
}

void rms_norm(ThreadPool& pool, const RmsNormParams& p) {
  const int64_t d = p.dim;
  float* w = thread_scratch<float>(Scratch::kRow2, static_cast<size_t>(d));
  bf16_to_f32(p.weight, w, d);
  pool.parallel_for(p.rows, [&](int64_t r0, int64_t r1) {
    float* x = thread_scratch<float>(Scratch::kRow, static_cast<size_t>(d));
    for (int64_t r = r0; r < r1; ++r) {
      bf16_to_f32(p.x + r * d, x, d);
      rms_norm_row(x, w, d, p.eps, x);
      f32_to_bf16(x, p.y + r * d, d);
    }
  });
}

void head_rms_norm(ThreadPool& pool, const HeadRmsNormParams& p) {
  const int d = p.head_dim;
  pool.parallel_for(p.rows * p.heads, [&](int64_t h0, int64_t h1) {
    float* sq = thread_scratch<float>(Scratch::kRow, static_cast<size_t>(d));
    for (int64_t h = h0; h < h1; ++h) {
      uint16_t* q = p.x + h * d;
      // Every step is a bf16 tensor op in the reference: compute in fp32, round to bf16.
      for (int i = 0; i < d; ++i) {
        const float v = bf16_to_float(q[i]);
        sq[i] = round_bf16(v * v);
      }
      const float mean = round_bf16(sum(sq, d) / static_cast<float>(d));
      const float v = round_bf16(mean + p.eps);
      const float r = round_bf16(1.0f / std::sqrt(v));
      for (int i = 0; i < d; ++i) q[i] = float_to_bf16(bf16_to_float(q[i]) * r);
    }
  });
}

}  // namespace dsv4::cpu
