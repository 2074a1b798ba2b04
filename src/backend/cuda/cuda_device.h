// CudaDevice: GPU memory and the one stream every CUDA op of a model runs on. Host-to-device copies go
// through pinned staging memory, so they are truly asynchronous (a pageable source would make the
// driver wait for the stream) and legal to capture; staging is recycled at each synchronisation. Allocations come from
// a stream-ordered pool (cudaMallocAsync) that keeps freed memory, so the model's per-step scratch costs no driver call
// after warm-up and stays legal inside CUDA graph capture. Kernels record index errors in a device flag
// (device_table.h); every copy back to the host synchronises the stream and throws if one was recorded, so a bad slot
// or id surfaces at the step that used it.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/device.h"

namespace dsv4::cuda {

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(int ordinal = 0);
  ~CudaDevice() override;
  CudaDevice(const CudaDevice&) = delete;
  CudaDevice& operator=(const CudaDevice&) = delete;

  bool host_memory() const override { return false; }
  uint64_t memory_capacity() const override;
  void* allocate(size_t bytes) override;
  void release(void* p) override;
  void to_device(void* dst, const void* src, size_t bytes) override;
  void to_host(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void fill_zero(void* p, size_t bytes) override;
  void synchronize() override;
  size_t mark() override;  // a CUDA event recorded on the stream
  double elapsed_ms(size_t a, size_t b) const override;
  void clear_marks() override { marks_used_ = 0; }

  cudaStream_t stream() const { return stream_; }
  int32_t* error_flag() const { return err_; }
  int ordinal() const { return ordinal_; }
  std::string name() const;

 private:
  void check_errors();
  // `bytes` of pinned staging valid until the next synchronize().
  void* stage(size_t bytes, bool after_sync = false);

  struct Pinned {
    void* p = nullptr;
    size_t bytes = 0;
  };
  std::vector<Pinned> staging_;  // blocks, filled in order and reused after each synchronize()
  size_t current_ = 0;           // the block being filled
  size_t staged_ = 0;            // bytes used of it

  int ordinal_ = 0;
  cudaStream_t stream_ = nullptr;
  cudaMemPool_t pool_ = nullptr;
  int32_t* err_ = nullptr;
  std::vector<cudaEvent_t> marks_;  // created on first use, reused after clear_marks()
  size_t marks_used_ = 0;
};

// Number of usable CUDA devices (0 when there is no driver or no GPU; never throws).
int device_count();

// Streaming multiprocessors of the current device (read once): kernels size their grids by it.
int sm_count();

}  // namespace dsv4::cuda
