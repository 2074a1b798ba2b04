// CPU compressor (MODEL.md §5.5): state rows from true-fp32 projections, then gated pooling of a
// block (overlapping for ratio 4), RMSNorm, RoPE and the Q8 / Had+Q4 simulation of the entry.
// Fixed orders: softmax sums and the weighted sum run over candidates in list order (previous
// block first), per channel.
#pragma once

#include "backend/ops.h"
#include "core/thread_pool.h"

namespace dsv4::cpu {

void compressor_step(ThreadPool& pool, const CompressorStepParams& p);
void compressor_emit(ThreadPool& pool, const CompressorEmitParams& p);

}  // namespace dsv4::cpu
