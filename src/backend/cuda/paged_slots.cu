#include <algorithm>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/paged_slots.h"

namespace dsv4::cuda {
namespace {

// paged_slots as its kernel gets it.
struct PagedSlotsLaunch : PagedSlotsParams {
  int32_t* err = nullptr;
};

// grid: (ceil(width / 256), rows of this slab); one thread per output slot.
__global__ void paged_slots_kernel(PagedSlotsLaunch a, int64_t r0) {
  pdl_enter();
  const int64_t r = r0 + blockIdx.y;
  const int32_t j = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x);
  if (j >= a.width) return;
  const int32_t l = a.list[r], n = a.count[r], first = a.first ? a.first[r] : 0;
  const int64_t base = (l >= 0 && l < a.lists && a.base) ? a.base[l] : 0;
  const int32_t row = !a.list_row ? l : (l >= 0 && l < a.lists ? a.list_row[l] : -1);
  const bool ok = l >= 0 && l < a.lists && n >= 0 && n <= a.width && first >= base && base % a.per_page == 0 &&
                  first + int64_t{n} <= base + int64_t{a.page_stride} * a.per_page &&
                  (!a.list_row || (row >= 0 && row < a.page_rows));
  if (!ok && j == 0) report(a.err, DeviceError::kPagedSlots);
  const int64_t i = int64_t{first} + j;
  int32_t page = ok && j < n ? a.pages[int64_t{row} * a.page_stride + (i - base) / a.per_page] : -1;
  if (a.map.pages && page >= 0) {  // a block id: the layer's page through the map
    const int64_t b = int64_t{page} - a.map.first_block;
    if (b < 0 || b >= a.map.blocks) report(a.err, DeviceError::kPagedSlots);
    page = b < 0 || b >= a.map.blocks ? -1 : a.map.pages[b * a.map.layers + a.map.layer];
  }
  a.out[r * a.width + j] = page < 0 ? -1 : static_cast<int32_t>(int64_t{page} * a.per_page + i % a.per_page);
}

}  // namespace

void paged_slots(const PagedSlotsParams& p, int32_t* err, cudaStream_t stream) {
  constexpr int64_t kMaxRows = 65535;  // grid.y limit: rows go in slabs
  const PagedSlotsLaunch a{p, err};
  for (int64_t r0 = 0; r0 < a.rows && a.width > 0; r0 += kMaxRows) {
    const dim3 grid(static_cast<unsigned>((a.width + 255) / 256),
                    static_cast<unsigned>(std::min(kMaxRows, a.rows - r0)));
    launch_kernel(paged_slots_kernel, grid, 256, 0, stream, a, r0);
  }
}

}  // namespace dsv4::cuda
