#include "backend/cuda/scratch_epoch.h"

#include <atomic>
#include <string>

#include "backend/cuda/cuda_check.h"

namespace dsv4::cuda {
namespace {

std::atomic<uint64_t> epoch{1};

}  // namespace

uint64_t scratch_epoch() { return epoch.load(std::memory_order_acquire); }

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  DSV4_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

void scratch_moves(cudaStream_t stream, const char* what) {
  if (capturing(stream))
    throw_error(std::string("cuda: ") + what + " would move while a step is being recorded (run it eagerly first)");
  epoch.fetch_add(1, std::memory_order_acq_rel);
}

}  // namespace dsv4::cuda
