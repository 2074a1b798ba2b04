// Slots from page lists on the device (backend/ops.h PagedSlotsParams): long runs of slots cost the
// host one lookup per page. A row whose list or count is out of range is reported (kPagedSlots) and
// written as −1.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace dsv4::cuda {

struct PagedSlotsArgs {
  int64_t rows = 0;
  int32_t width = 0;
  const int32_t* list = nullptr;
  const int32_t* first = nullptr;  // may be null: 0
  const int32_t* count = nullptr;
  const int32_t* pages = nullptr;
  const int32_t* base = nullptr;  // may be null: 0
  int64_t lists = 0;
  int32_t page_stride = 0;
  int32_t per_page = 1;
  int32_t* out = nullptr;
  int32_t* err = nullptr;
};

void paged_slots(const PagedSlotsArgs& a, cudaStream_t stream);

}  // namespace dsv4::cuda
