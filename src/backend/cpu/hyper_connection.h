// CPU manifold-constrained hyper-connections (MODEL.md §4): hc_pre with Sinkhorn, hc_post, hc_head.
// Fixed orders: mean(X²) uses the 8-lane sum of cpu_support.h, the mix GEMM the linear's order,
// stream sums run over j in ascending order.
#pragma once

#include "backend/ops.h"
#include "core/thread_pool.h"

namespace dsv4::cpu {

// Sinkhorn on one hc×hc matrix in place (§4.2): row softmax + eps, column normalisation, then
// (iters − 1)× row and column normalisation, each x / (Σ + eps).
void sinkhorn(float* c, int hc, int iters, float eps);

void hc_pre(ThreadPool& pool, const HcPreParams& p);
void hc_post(ThreadPool& pool, const HcPostParams& p);
void hc_head(ThreadPool& pool, const HcHeadParams& p);

}  // namespace dsv4::cpu
