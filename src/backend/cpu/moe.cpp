#include "backend/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_support.h"
#include "backend/cpu/linear.h"
#include "backend/moe_routing.h"
#include "core/error.h"

namespace dsv4::cpu {
namespace {

void score(ScoreFunc f, const float* z, int n, float* s) {
  switch (f) {
    case ScoreFunc::kSqrtSoftplus:
      for (int e = 0; e < n; ++e) s[e] = std::sqrt(z[e] > 20.0f ? z[e] : std::log1p(std::exp(z[e])));
      return;
    case ScoreFunc::kSigmoid:
      for (int e = 0; e < n; ++e) s[e] = sigmoid(z[e]);
      return;
    case ScoreFunc::kSoftmax: {
      const float mx = *std::max_element(z, z + n);
      float sum = 0;
      for (int e = 0; e < n; ++e) sum += (s[e] = std::exp(z[e] - mx));
      for (int e = 0; e < n; ++e) s[e] /= sum;
      return;
    }
  }
}

// The k largest of sel, descending, ties to the lower index.
void top_k(const float* sel, int n, int k, int32_t* out) {
  for (int r = 0; r < k; ++r) {
    int best = -1;
    for (int e = 0; e < n; ++e) {
      if (std::find(out, out + r, e) != out + r) continue;
      if (best < 0 || sel[e] > sel[best]) best = e;
    }
    out[r] = best;
  }
}

void route_token(const MoeGateParams& p, int64_t t, const float* z, float* s, float* sel) {
  const int E = p.experts, k = p.topk;
  int32_t* idx = p.indices + t * k;
  float* w = p.weights + t * k;
  score(p.score_func, z, E, s);
  if (p.tid2eid) {
    const int32_t tok = p.token_ids[t];
    DSV4_CHECK(tok >= 0 && tok < p.vocab, "moe_gate: token id {} outside [0, {})", tok, p.vocab);
    for (int r = 0; r < k; ++r) {
      idx[r] = p.tid2eid[int64_t{tok} * k + r];
      DSV4_CHECK(idx[r] >= 0 && idx[r] < E, "moe_gate: tid2eid[{}] names expert {} of {}", tok, idx[r], E);
    }
  } else {
    for (int e = 0; e < E; ++e) sel[e] = p.bias ? s[e] + p.bias[e] : s[e];
    top_k(sel, E, k, idx);
  }
  float sum = 0;
  for (int r = 0; r < k; ++r) sum += (w[r] = s[idx[r]]);
  for (int r = 0; r < k; ++r) {
    if (p.score_func != ScoreFunc::kSoftmax) w[r] /= sum;
    w[r] *= p.route_scale;
  }
}

// a = bf16(weight · swiglu(w1(x), w3(x))) for n gathered rows; inter = the rows of w1 and w3.
void expert_up(ThreadPool& pool, const uint16_t* x, int64_t n, int64_t inter, const Weight& w1, const Weight& w3,
               const float* weight, float limit, uint16_t* a) {
  std::vector<uint16_t> u(static_cast<size_t>(n * inter));
  linear(pool, {.x = x, .rows = n, .w = w1, .y = a});
  linear(pool, {.x = x, .rows = n, .w = w3, .y = u.data()});
  swiglu(pool, {.g = a, .u = u.data(), .rows = n, .dim = inter, .limit = limit, .weights = weight, .out = a});
}

// y = w2(bf16(swiglu(w1(x), w3(x)))) for n gathered rows.
void run_expert(ThreadPool& pool, const uint16_t* x, int64_t n, int64_t inter, const Weight& w1, const Weight& w3,
                const Weight& w2, const float* weight, float limit, uint16_t* y) {
  std::vector<uint16_t> a(static_cast<size_t>(n * inter));
  expert_up(pool, x, n, inter, w1, w3, weight, limit, a.data());
  linear(pool, {.x = a.data(), .rows = n, .w = w2, .y = y});
}

// Copies rows `ids` (of width w) of src into dst, back to back (scatter: the other way).
void gather_rows(const uint16_t* src, const int64_t* ids, int64_t n, int64_t w, uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) std::copy(src + ids[i] * w, src + (ids[i] + 1) * w, dst + i * w);
}
void scatter_rows(const uint16_t* src, const int64_t* ids, int64_t n, int64_t w, uint16_t* dst) {
  for (int64_t i = 0; i < n; ++i) std::copy(src + i * w, src + (i + 1) * w, dst + ids[i] * w);
}

}  // namespace

void swiglu(ThreadPool& pool, const SwigluParams& p) {
  const int64_t d = p.dim;
  pool.parallel_for(p.rows, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0 * d; i < r1 * d; ++i) {
      float g = bf16_to_float(p.g[i]), u = bf16_to_float(p.u[i]);
      if (p.limit > 0) {
        u = std::clamp(u, -p.limit, p.limit);
        g = std::min(g, p.limit);
      }
      float a = g / (1.0f + std::exp(-g)) * u;
      if (p.weights) a = p.weights[i / d] * a;
      p.out[i] = float_to_bf16(a);
    }
  });
}

void moe_gate(ThreadPool& pool, const MoeGateParams& p) {
  const int E = p.experts;
  std::vector<float> z(static_cast<size_t>(p.tokens * E));
  linear(pool, {.x = p.x, .rows = p.tokens, .w = p.weight, .y = z.data(), .y_type = ActType::kF32});
  pool.parallel_for(p.tokens, [&](int64_t t0, int64_t t1) {
    float* s = thread_scratch<float>(Scratch::kRow, static_cast<size_t>(2 * E));
    for (int64_t t = t0; t < t1; ++t) route_token(p, t, &z[static_cast<size_t>(t * E)], s, s + E);
  });
}

void moe_experts(ThreadPool& pool, const MoeExpertsParams& p) {
  const int64_t T = p.tokens, D = p.dim;
  const MoeRouting routing = route_pairs("moe_experts", p.indices, p.weights, p.tokens, p.topk, p.experts);
  std::vector<float> acc(static_cast<size_t>(T * D), 0.0f);
  std::vector<uint16_t> xs, ys;
  for (int e = 0; e < p.experts; ++e) {  // ascending: the order each token's sum sees its experts
    const int64_t begin = routing.offsets[static_cast<size_t>(e)],
                  n = routing.offsets[static_cast<size_t>(e) + 1] - begin;
    if (n == 0) continue;
    const int64_t* tokens = &routing.tokens[static_cast<size_t>(begin)];
    xs.resize(static_cast<size_t>(n * D));
    ys.resize(xs.size());
    gather_rows(p.x, tokens, n, D, xs.data());
    run_expert(pool, xs.data(), n, p.inter_dim, p.w1[e], p.w3[e], p.w2[e], &routing.weights[static_cast<size_t>(begin)],
               p.swiglu_limit, ys.data());
    for (int64_t i = 0; i < n; ++i) {
      float* a = &acc[static_cast<size_t>(tokens[i] * D)];
      for (int64_t c = 0; c < D; ++c) a[c] += bf16_to_float(ys[static_cast<size_t>(i * D + c)]);
    }
  }
  const uint16_t* shared = p.shared_y;
  if (!shared) {
    ys.resize(static_cast<size_t>(T * D));
    shared_expert(pool, {p.x, T, D, p.inter_dim, p.shared_w1, p.shared_w3, p.shared_w2, ys.data()});
    shared = ys.data();
  }
  for (int64_t i = 0; i < T * D; ++i) p.y[i] = float_to_bf16(acc[static_cast<size_t>(i)] + bf16_to_float(shared[i]));
}

void shared_expert(ThreadPool& pool, const SharedExpertParams& p) {
  run_expert(pool, p.x, p.tokens, p.inter_dim, p.w1, p.w3, p.w2, nullptr, 0.0f, p.y);
}

void moe_pairs(ThreadPool& pool, const MoePairsParams& p) {
  const bool up = p.stage == MoeStage::kUp;
  const MoeRouting routing = route_pairs("moe_pairs", p.indices, up ? p.weights : nullptr, p.tokens, p.topk, p.experts);
  std::vector<uint16_t> in, out;
  for (int e = 0; e < p.experts; ++e) {
    const auto b = static_cast<size_t>(routing.offsets[static_cast<size_t>(e)]);
    const int64_t n = routing.offsets[static_cast<size_t>(e) + 1] - routing.offsets[static_cast<size_t>(e)];
    if (n == 0 || !(up ? p.w1 : p.w2)[e].data) continue;  // no pairs, or another rank's expert
    in.resize(static_cast<size_t>(n * p.in_dim));
    out.resize(static_cast<size_t>(n * p.out_dim));
    gather_rows(p.in, up ? &routing.tokens[b] : &routing.pairs[b], n, p.in_dim, in.data());
    if (up)
      expert_up(pool, in.data(), n, p.out_dim, p.w1[e], p.w3[e], &routing.weights[b], p.swiglu_limit, out.data());
    else
      linear(pool, {.x = in.data(), .rows = n, .w = p.w2[e], .y = out.data()});
    scatter_rows(out.data(), &routing.pairs[b], n, p.out_dim, p.out);
  }
}

void moe_combine(ThreadPool& pool, const MoeCombineParams& p) {
  const int64_t D = p.dim;
  pool.parallel_for(p.tokens, [&](int64_t t0, int64_t t1) {
    std::vector<int> order(static_cast<size_t>(p.topk));
    for (int64_t t = t0; t < t1; ++t) {
      const int32_t* idx = p.indices + t * p.topk;
      for (int k = 0; k < p.topk; ++k) order[static_cast<size_t>(k)] = k;
      std::sort(order.begin(), order.end(), [&](int a, int b) { return idx[a] < idx[b]; });
      for (int64_t c = 0; c < D; ++c) {
        float acc = 0.0f;  // as moe_experts: from 0, experts ascending, the shared expert last
        for (int k : order) acc += bf16_to_float(p.pairs[(t * p.topk + k) * D + c]);
        p.y[t * D + c] = float_to_bf16(acc + bf16_to_float(p.shared_y[t * D + c]));
      }
    }
  });
}

}  // namespace dsv4::cpu
