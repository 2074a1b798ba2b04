// CPU indexer scoring and top-k selection (MODEL.md §5.6). Ties in the top-k go to the lower entry
// index; the CUDA backend must break them the same way.
#pragma once

#include "backend/ops.h"
#include "core/thread_pool.h"

namespace dsv4::cpu {

void indexer_topk(ThreadPool& pool, const IndexerTopkParams& p);

}  // namespace dsv4::cpu
