// The sample op on the CPU (backend/op_params.h SampleParams): backend/sample_row.h row by row, on the
// pool's threads.
#pragma once

#include "backend/op_params.h"
#include "core/thread_pool.h"

namespace dsv4::cpu {

void sample(ThreadPool& pool, const SampleParams& p);

}  // namespace dsv4::cpu
