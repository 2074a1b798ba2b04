#include "backend/cuda/cuda_check.h"

#include "core/error.h"

namespace dsv4::cuda {

void throw_cuda_error(cudaError_t err, const char* file, int line, const char* expr) {
  fail("CUDA error {} ({}) at {}:{}: {}", static_cast<int>(err), cudaGetErrorString(err), file, line, expr);
}

void throw_error(const std::string& message) { throw Error(message); }

}  // namespace dsv4::cuda
