// CPU sparse attention with sink over window + compressed entries (MODEL.md §5.7), evaluated like
// the reference kernel: positional 64-blocks, online softmax in fp32, P rounded to bf16 before P·V.
// Fixed orders: q·k uses the 8-lane dot of cpu_support.h; block sums and P·V go in list order.
#pragma once

#include "backend/ops.h"
#include "core/thread_pool.h"

namespace dsv4::cpu {

void sparse_attention(ThreadPool& pool, const SparseAttentionParams& p);

}  // namespace dsv4::cpu
