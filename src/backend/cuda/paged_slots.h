// Slots from page lists on the device (backend/op_params.h PagedSlotsParams, device pointers): long runs
// of slots cost the host one lookup per page. A row whose list or count is out of range is reported in
// err (kPagedSlots) and written as −1.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/op_params.h"

namespace dsv4::cuda {

void paged_slots(const PagedSlotsParams& p, int32_t* err, cudaStream_t stream);

}  // namespace dsv4::cuda
