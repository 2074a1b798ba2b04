#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/paged_slots.h"

namespace dsv4::cuda {
namespace {

// grid: (ceil(width / 256), rows); one thread per output slot.
__global__ void paged_slots_kernel(int32_t width, const int32_t* list, const int32_t* count, const int32_t* pages,
                                   int64_t lists, int32_t page_stride, int32_t per_page, int32_t* out, int32_t* err) {
  const int64_t r = blockIdx.y;
  const int32_t j = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= width) return;
  const int32_t l = list[r], n = count[r];
  const bool ok = l >= 0 && l < lists && n >= 0 && n <= width && int64_t{n} <= int64_t{page_stride} * per_page;
  if (!ok && j == 0) report(err, DeviceError::kPagedSlots);
  const int32_t page = ok && j < n ? pages[int64_t{l} * page_stride + j / per_page] : -1;
  out[r * width + j] = page < 0 ? -1 : page * per_page + j % per_page;
}

}  // namespace

void paged_slots(int64_t rows, int32_t width, const int32_t* list, const int32_t* count, const int32_t* pages,
                 int64_t lists, int32_t page_stride, int32_t per_page, int32_t* out, int32_t* err,
                 cudaStream_t stream) {
  constexpr int64_t kMaxRows = 65535;  // grid.y limit: rows go in slabs
  for (int64_t r0 = 0; r0 < rows && width > 0; r0 += kMaxRows) {
    const dim3 grid(static_cast<unsigned>((width + 255) / 256), static_cast<unsigned>(std::min(kMaxRows, rows - r0)));
    paged_slots_kernel<<<grid, 256, 0, stream>>>(width, list + r0, count + r0, pages, lists, page_stride, per_page,
                                                 out + r0 * width, err);
    DSV4_CUDA_CHECK_LAUNCH();
  }
}

}  // namespace dsv4::cuda
