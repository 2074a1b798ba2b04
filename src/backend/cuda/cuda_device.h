// CudaDevice: GPU memory and the stream every CUDA op of a model runs on (plus a side stream for work
// forked beside it, and stream capture into CUDA graphs). Host-to-device copies go
// through pinned staging memory, so they are truly asynchronous (a pageable source would make the
// driver wait for the stream) and legal to capture; staging is recycled at each synchronisation. Allocations come from
// a stream-ordered pool (cudaMallocAsync) that keeps freed memory, so the model's per-step scratch costs no driver call
// after warm-up and stays legal inside CUDA graph capture. Kernels record index errors in a device flag
// (device_error.h); every copy back to the host synchronises the stream and throws if one was recorded, so a bad slot
// or id surfaces at the step that used it.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_set>
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
  uint64_t memory_free() const override;
  void* allocate(size_t bytes) override;
  MemoryUse memory_use() const override;
  void reset_memory_peak() override;
  void release(void* p) override;
  void to_device(void* dst, const void* src, size_t bytes) override;
  void to_device_skipping(void* dst, const void* src, size_t bytes, std::span<const Range> skip) override;
  void to_host(void* dst, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;  // any direction (unified addressing)
  void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows) override;
  void copy_many(std::span<const Copy> copies) override;
  void* allocate_pinned(size_t bytes) override;  // cudaHostAlloc
  void release_pinned(void* p) override;
  void fill_zero(void* p, size_t bytes) override;
  void synchronize() override;
  double waited_seconds() const override { return waited_.load(std::memory_order_relaxed); }
  void bind_thread() override;
  size_t mark() override;  // a CUDA event recorded on the stream
  double elapsed_ms(size_t a, size_t b) const override;
  void clear_marks() override { marks_used_ = 0; }
  void begin_side() override;        // the side stream waits for the main one and becomes current
  void end_side() override;          // the main stream is current again (the side one runs on)
  void join_side() override;         // the main stream waits for the side one
  void begin_background() override;  // the copy stream waits for the main one and becomes current
  uint64_t end_background() override;
  bool landed(uint64_t ticket) override;
  double background_seconds() const override { return background_seconds_; }
  bool start_trace() override;  // CUPTI (kernel_trace.h)
  std::vector<KernelSpan> stop_trace() override;
  std::string trace_unavailable() const override { return trace_why_; }
  bool can_record() const override { return true; }
  void begin_recording() override;  // stream capture of the main stream (and its side branches)
  std::unique_ptr<Recording> end_recording() override;
  void abort_recording() noexcept override;
  void replay(const Recording& r) override;

  // The stream work goes to now: the main stream, or the side stream between begin_side() and end_side().
  cudaStream_t stream() const { return active_; }
  cudaStream_t main_stream() const { return stream_; }
  bool recording() const { return recording_; }
  int32_t* error_flag() const { return err_; }
  int ordinal() const { return ordinal_; }
  std::string name() const;

 private:
  void check_errors();
  void add_waited(std::chrono::steady_clock::time_point since);  // to waited_seconds()
  // `bytes` of pinned staging valid until the next synchronize().
  void* stage(size_t bytes, bool after_sync = false);

  struct Pinned {
    void* p = nullptr;
    size_t bytes = 0;
  };
  std::vector<Pinned> staging_;  // blocks, filled in order and reused after each synchronize()
  size_t current_ = 0;           // the block being filled
  size_t staged_ = 0;            // bytes used of it

  void refuse_while_recording(const char* what) const;
  void finish_recording() noexcept;
  void end_side_capture() noexcept;

  int ordinal_ = 0;
  std::string trace_why_ = "the kernel trace was not started";
  std::atomic<double> waited_{0};  // waited_seconds()
  cudaStream_t stream_ = nullptr;  // main
  cudaStream_t side_ = nullptr;    // the side queue (begin_side)
  cudaStream_t active_ = nullptr;  // stream_ or side_
  cudaEvent_t forked_ = nullptr, joined_ = nullptr;
  // Background copies: their stream (made on first use), a ticket's start and end events (tickets
  // count up from 1; the stream runs them in order, so they complete in ticket order), the last ticket
  // seen complete and the device time of those landed.
  struct Ticket {
    uint64_t id;
    cudaEvent_t start, end;
  };
  cudaStream_t copies_ = nullptr;
  cudaEvent_t copies_after_ = nullptr;
  cudaEvent_t copies_start_ = nullptr;  // recorded in begin_background, owned by the ticket that follows
  std::deque<Ticket> tickets_;
  uint64_t next_ticket_ = 1, landed_ = 0;
  double background_seconds_ = 0;
  bool recording_ = false;
  // Memory taken while recording lives in the graph: freed inside it, or never really there when the
  // recording is discarded. Memory from outside freed inside a recording breaks it (a replay would
  // free it again): that free waits for the recording's end, which then fails.
  std::unordered_set<void*> recorded_, discarded_;
  std::vector<void*> deferred_frees_;
  bool broken_ = false;
  cudaMemPool_t pool_ = nullptr;
  int32_t* err_ = nullptr;
  std::vector<cudaEvent_t> marks_;  // created on first use, reused after clear_marks()
  size_t marks_used_ = 0;
};

// Number of usable CUDA devices (0 when there is no driver or no GPU; never throws).
int device_count();

// Streaming multiprocessors of the current device (read once): kernels size their grids by it.
int sm_count();
// The most shared memory a block may opt in to on the current device (read once).
int smem_optin();

}  // namespace dsv4::cuda
