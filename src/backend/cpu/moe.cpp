#include "backend/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_support.h"
#include "backend/cpu/linear.h"
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

// y = w2(bf16(swiglu(w1(x), w3(x)))) for n gathered rows.
void run_expert(ThreadPool& pool, const uint16_t* x, int64_t n, int64_t inter, const Weight& w1, const Weight& w3,
                const Weight& w2, const float* weight, float limit, uint16_t* y) {
  std::vector<uint16_t> g(static_cast<size_t>(n * inter)), u(g.size());
  linear(pool, {.x = x, .rows = n, .w = w1, .y = g.data()});
  linear(pool, {.x = x, .rows = n, .w = w3, .y = u.data()});
  swiglu(pool,
         {.g = g.data(), .u = u.data(), .rows = n, .dim = inter, .limit = limit, .weights = weight, .out = g.data()});
  linear(pool, {.x = g.data(), .rows = n, .w = w2, .y = y});
}

// Tokens of each expert in ascending token order, as CSR: (token, routing weight) pairs.
struct Routing {
  std::vector<int64_t> offsets;  // [experts + 1]
  std::vector<int64_t> tokens;
  std::vector<float> weights;
};

Routing bucket(const MoeExpertsParams& p) {
  Routing r;
  r.offsets.assign(static_cast<size_t>(p.experts) + 1, 0);
  const int64_t n = p.tokens * p.topk;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = p.indices[i];
    DSV4_CHECK(id >= 0 && id < p.experts, "moe_experts: token {} routed to expert {} of {}", i / p.topk, id, p.experts);
    ++r.offsets[static_cast<size_t>(id) + 1];
  }
  for (int e = 0; e < p.experts; ++e) r.offsets[static_cast<size_t>(e) + 1] += r.offsets[static_cast<size_t>(e)];
  std::vector<int64_t> fill(r.offsets.begin(), r.offsets.end() - 1);
  r.tokens.resize(static_cast<size_t>(n));
  r.weights.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t at = fill[static_cast<size_t>(p.indices[i])]++;
    r.tokens[static_cast<size_t>(at)] = i / p.topk;
    r.weights[static_cast<size_t>(at)] = p.weights[i];
  }
  return r;
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
  const Routing routing = bucket(p);
  std::vector<float> acc(static_cast<size_t>(T * D), 0.0f);
  std::vector<uint16_t> xs, ys;
  for (int e = 0; e < p.experts; ++e) {  // ascending: the order each token's sum sees its experts
    const int64_t begin = routing.offsets[static_cast<size_t>(e)],
                  n = routing.offsets[static_cast<size_t>(e) + 1] - begin;
    if (n == 0) continue;
    const int64_t* tokens = &routing.tokens[static_cast<size_t>(begin)];
    xs.resize(static_cast<size_t>(n * D));
    ys.resize(xs.size());
    for (int64_t i = 0; i < n; ++i)
      std::copy(p.x + tokens[i] * D, p.x + (tokens[i] + 1) * D, &xs[static_cast<size_t>(i * D)]);
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

}  // namespace dsv4::cpu
