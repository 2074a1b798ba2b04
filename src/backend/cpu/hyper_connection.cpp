#include "backend/cpu/hyper_connection.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_support.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/norms.h"

namespace dsv4::cpu {
namespace {

// mix[t] = (X_t · fnᵀ) · rs_t for all tokens: the true-fp32 GEMM, then the RMS factor.
std::vector<float> mixes(ThreadPool& pool, const uint16_t* h, int64_t tokens, int64_t width, const float* fn,
                         int mix_width, float eps) {
  std::vector<float> mix(static_cast<size_t>(tokens * mix_width));
  linear(pool,
         {.x = h, .rows = tokens, .w = Weight::f32(fn, mix_width, width), .y = mix.data(), .y_type = ActType::kF32});
  pool.parallel_for(tokens, [&](int64_t t0, int64_t t1) {
    float* x = thread_scratch<float>(Scratch::kRow, static_cast<size_t>(width));
    for (int64_t t = t0; t < t1; ++t) {
      bf16_to_f32(h + t * width, x, width);
      const float rs = 1.0f / std::sqrt(sum_squares(x, width) / static_cast<float>(width) + eps);
      for (int i = 0; i < mix_width; ++i) mix[static_cast<size_t>(t * mix_width + i)] *= rs;
    }
  });
  return mix;
}

// y = bf16(Σ_j pre_j · X_j), j ascending.
void weighted_streams(const uint16_t* h, const float* pre, int hc, int64_t dim, uint16_t* y, float* acc) {
  std::fill(acc, acc + dim, 0.0f);
  for (int j = 0; j < hc; ++j) {
    const uint16_t* xj = h + j * dim;
    for (int64_t c = 0; c < dim; ++c) acc[c] += pre[j] * bf16_to_float(xj[c]);
  }
  f32_to_bf16(acc, y, dim);
}

// What hc_pre and hc_head share, per token t of p (either's params): its mix m (mix_width outputs, the
// hc pre ones first), pre_j = sigmoid(m_j·scale0 + base_j) + hc_eps, `rest(t, m)` for the other mix
// outputs, then y_t = bf16(Σ_j pre_j · X_j).
template <typename P, typename Rest>
void pre_and_streams(ThreadPool& pool, const P& p, int mix_width, uint16_t* y, Rest&& rest) {
  const int hc = p.hc;
  const int64_t width = hc * p.dim;
  const std::vector<float> mix = mixes(pool, p.h, p.tokens, width, p.fn, mix_width, p.norm_eps);
  pool.parallel_for(p.tokens, [&](int64_t t0, int64_t t1) {
    float* acc = thread_scratch<float>(Scratch::kRow, static_cast<size_t>(p.dim));
    float pre[64];
    for (int64_t t = t0; t < t1; ++t) {
      const float* m = &mix[static_cast<size_t>(t * mix_width)];
      for (int j = 0; j < hc; ++j) pre[j] = sigmoid(m[j] * p.scale[0] + p.base[j]) + p.hc_eps;
      rest(t, m);
      weighted_streams(p.h + t * width, pre, hc, p.dim, y + t * p.dim, acc);
    }
  });
}

}  // namespace

void sinkhorn(float* c, int hc, int iters, float eps) {
  float sums[64];
  for (int j = 0; j < hc; ++j) {
    float* row = c + j * hc;
    const float mx = *std::max_element(row, row + hc);
    float s = 0;
    for (int k = 0; k < hc; ++k) s += (row[k] = std::exp(row[k] - mx));
    for (int k = 0; k < hc; ++k) row[k] = row[k] / s + eps;
  }
  auto normalize_columns = [&] {
    for (int k = 0; k < hc; ++k) {
      sums[k] = 0;
      for (int j = 0; j < hc; ++j) sums[k] += c[j * hc + k];
    }
    for (int j = 0; j < hc; ++j)
      for (int k = 0; k < hc; ++k) c[j * hc + k] /= sums[k] + eps;
  };
  normalize_columns();
  for (int it = 1; it < iters; ++it) {
    for (int j = 0; j < hc; ++j) {
      float s = 0;
      for (int k = 0; k < hc; ++k) s += c[j * hc + k];
      for (int k = 0; k < hc; ++k) c[j * hc + k] /= s + eps;
    }
    normalize_columns();
  }
}

void hc_pre(ThreadPool& pool, const HcPreParams& p) {
  const int hc = p.hc;
  pre_and_streams(pool, p, (2 + hc) * hc, p.x, [&](int64_t t, const float* m) {
    float* post = p.post + t * hc;
    float* comb = p.comb + t * hc * hc;
    for (int j = 0; j < hc; ++j) post[j] = 2 * sigmoid(m[hc + j] * p.scale[1] + p.base[hc + j]);
    for (int i = 0; i < hc * hc; ++i) comb[i] = m[2 * hc + i] * p.scale[2] + p.base[2 * hc + i];
    sinkhorn(comb, hc, p.sinkhorn_iters, p.hc_eps);
  });
  if (p.out_norm) rms_norm(pool, {p.x, p.x, p.out_norm, p.tokens, p.dim, p.out_norm_eps});
}

void hc_post(ThreadPool& pool, const HcPostParams& p) {
  const int hc = p.hc;
  const int64_t d = p.dim;
  pool.parallel_for(p.tokens, [&](int64_t t0, int64_t t1) {
    float* res = thread_scratch<float>(Scratch::kRow, static_cast<size_t>(hc * d + d));
    float* x = res + hc * d;
    for (int64_t t = t0; t < t1; ++t) {
      bf16_to_f32(p.residual + t * hc * d, res, hc * d);  // a copy, so out may alias residual
      bf16_to_f32(p.x + t * d, x, d);
      const float* comb = p.comb + t * hc * hc;
      for (int k = 0; k < hc; ++k) {
        const float post = p.post[t * hc + k];
        uint16_t* out = p.out + (t * hc + k) * d;
        for (int64_t c = 0; c < d; ++c) {
          float s = 0;
          for (int j = 0; j < hc; ++j) s += comb[j * hc + k] * res[j * d + c];
          out[c] = float_to_bf16(post * x[c] + s);
        }
      }
    }
  });
}

void hc_head(ThreadPool& pool, const HcHeadParams& p) {
  pre_and_streams(pool, p, p.hc, p.y, [](int64_t, const float*) {});
  if (p.out_norm) rms_norm(pool, {p.y, p.y, p.out_norm, p.tokens, p.dim, p.out_norm_eps});
}

}  // namespace dsv4::cpu
