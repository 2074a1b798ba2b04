#include "backend/cpu/rotary.h"

#include <cmath>
#include <vector>

#include "backend/cpu/cpu_support.h"
#include "backend/cpu/row_ops.h"

namespace dsv4::cpu {

void rope_angles(const float* freqs, int half, int32_t position, float* cos_out, float* sin_out) {
  const float p = static_cast<float>(position);
  for (int i = 0; i < half; ++i) {
    const float angle = p * freqs[i];
    cos_out[i] = std::cos(angle);
    sin_out[i] = std::sin(angle);
  }
}

void rope_rotate(float* x, const float* cos_v, const float* sin_v, int half, bool inverse) {
  for (int i = 0; i < half; ++i) {
    const float re = x[2 * i], im = x[2 * i + 1];
    const float c = cos_v[i], s = inverse ? -sin_v[i] : sin_v[i];
    // (re + i·im)(c + i·s), as a complex product in fp32.
    x[2 * i] = re * c - im * s;
    x[2 * i + 1] = re * s + im * c;
  }
}

void rope(ThreadPool& pool, const RopeParams& p) {
  const std::vector<float> freqs = rope_frequencies(p.rope);
  const int half = p.rope.rope_dim / 2;
  const int offset = p.head_dim - p.rope.rope_dim;
  pool.parallel_for(p.rows, [&](int64_t r0, int64_t r1) {
    float* buf = thread_scratch<float>(Scratch::kRow, static_cast<size_t>(4 * half));
    float *cs = buf, *sn = buf + half, *x = buf + 2 * half;
    for (int64_t r = r0; r < r1; ++r) {
      rope_angles(freqs.data(), half, p.positions[r], cs, sn);
      for (int h = 0; h < p.heads; ++h) {
        uint16_t* v = p.x + (r * p.heads + h) * p.head_dim + offset;
        bf16_to_f32(v, x, 2 * half);
        rope_rotate(x, cs, sn, half, p.inverse);
        f32_to_bf16(x, v, 2 * half);
      }
    }
  });
}

void hadamard_row(float* x, int n) {
  for (int h = 1; h < n; h *= 2) {
    for (int i = 0; i < n; i += 2 * h) {
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
    }
  }
  const float scale = static_cast<float>(std::pow(static_cast<double>(n), -0.5));  // Python n ** -0.5
  for (int i = 0; i < n; ++i) x[i] *= scale;
}

void hadamard(ThreadPool& pool, const HadamardParams& p) {
  pool.parallel_for(p.rows, [&](int64_t r0, int64_t r1) {
    float* x = thread_scratch<float>(Scratch::kRow, static_cast<size_t>(p.dim));
    for (int64_t r = r0; r < r1; ++r) {
      uint16_t* v = p.x + r * p.dim;
      bf16_to_f32(v, x, p.dim);
      hadamard_row(x, p.dim);
      f32_to_bf16(x, v, p.dim);
    }
  });
  if (p.fp4_after) quant_sim(pool, {p.x, p.rows, p.dim, p.dim, QuantSim::kFp4, 32});
}

}  // namespace dsv4::cpu
