// Slots from page lists on the device (backend/ops.h PagedSlotsParams): long runs of slots cost the
// host one lookup per page. A row whose list or count is out of range is reported (kPagedSlots) and
// written as −1.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dsv4::cuda {

void paged_slots(int64_t rows, int32_t width, const int32_t* list, const int32_t* count, const int32_t* pages,
                 int64_t lists, int32_t page_stride, int32_t per_page, int32_t* out, int32_t* err,
                 cudaStream_t stream);

}  // namespace dsv4::cuda
