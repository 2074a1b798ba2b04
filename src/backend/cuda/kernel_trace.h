// The CUDA devices' kernel timeline: CUPTI's activity records of every kernel (graph replays included),
// CUPTI loaded at first use so that a machine without it still runs everything else.
#pragma once

#include <string>
#include <vector>

#include "backend/device.h"

namespace dsv4::cuda {

// Starts recording (process-wide: CUPTI's activity buffers are one per process); false, with why set,
// where CUPTI cannot be loaded or refuses.
bool start_kernel_trace(std::string& why);
// Flushes what the devices finished and stops recording: the kernels that ran on device `ordinal`
// since the start (the caller has waited for them), by start time.
std::vector<Device::KernelSpan> stop_kernel_trace(int ordinal);

}  // namespace dsv4::cuda
