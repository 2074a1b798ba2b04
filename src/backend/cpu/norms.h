// CPU RMSNorm (MODEL.md §2.5) and the per-head query RMS with bf16 ops (§5.2).
#pragma once

#include "backend/ops.h"
#include "core/thread_pool.h"

namespace dsv4::cpu {

// y = w · (x · (1/sqrt(Σx²/n + eps))) in fp32 on one row; x and y may alias.
void rms_norm_row(const float* x, const float* w, int64_t n, float eps, float* y);

void rms_norm(ThreadPool& pool, const RmsNormParams& p);
void head_rms_norm(ThreadPool& pool, const HeadRmsNormParams& p);

}  // namespace dsv4::cpu
