#include "backend/cuda/cuda_device.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_error.h"
#include "backend/cuda/kernel_trace.h"
#include "backend/cuda/page_copy.h"
#include "core/error.h"

namespace dsv4::cuda {
namespace {

const char* error_name(int32_t code) {
  switch (static_cast<DeviceError>(code)) {
    case DeviceError::kNone:
      return "none";
    case DeviceError::kStoreSlot:
      return "store_entries: a slot outside its table";
    case DeviceError::kAttentionSlot:
      return "sparse_attention: a slot outside its table";
    case DeviceError::kCompressorSlot:
      return "compressor: a state or output slot outside its table, or a missing row";
    case DeviceError::kIndexerSlot:
      return "indexer_topk: a key slot outside its table";
    case DeviceError::kMoeExpert:
      return "moe: an expert id outside [0, experts)";
    case DeviceError::kMoeToken:
      return "moe_gate: a token id outside the hash-routing table";
    case DeviceError::kEmbedId:
      return "embed: a token id outside the vocabulary";
    case DeviceError::kPagedSlots:
      return "paged_slots: a row's page list or count out of range";
    case DeviceError::kGemmFp4Span:
      return "gemm: an FP4 weight's four scales in a 128-wide block span more than 26 octaves, beyond the exact "
             "per-128 re-encoding of the wgmma kernel (DSV4_GEMM_WGMMA_MIN_ROWS above the step's rows keeps "
             "such weights on the per-32 mma.sync and few-row kernels)";
    case DeviceError::kGatherRow:
      return "gather_rows: a row index outside the input's rows";
  }
  return "unknown device error";
}

// Pinned staging held at most (beyond one block larger than it): bulk uploads reuse it.
constexpr size_t kStagingCap = size_t{256} << 20;

}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

namespace {

int current_attribute(cudaDeviceAttr attr) {
  int dev = 0, v = 0;
  DSV4_CUDA_CHECK(cudaGetDevice(&dev));
  DSV4_CUDA_CHECK(cudaDeviceGetAttribute(&v, attr, dev));
  return v;
}

}  // namespace

int sm_count() {
  static const int n = current_attribute(cudaDevAttrMultiProcessorCount);
  return n;
}

int smem_optin() {
  static const int n = current_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin);
  return n;
}

CudaDevice::CudaDevice(int ordinal) : ordinal_(ordinal) {
  DSV4_CHECK(ordinal >= 0 && ordinal < device_count(), "cuda: no GPU with ordinal {} ({} found)", ordinal,
             device_count());
  DSV4_CUDA_CHECK(cudaSetDevice(ordinal));
  DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking));
  DSV4_CUDA_CHECK(cudaEventCreateWithFlags(&forked_, cudaEventDisableTiming));
  DSV4_CUDA_CHECK(cudaEventCreateWithFlags(&joined_, cudaEventDisableTiming));
  active_ = stream_;
  DSV4_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool_, ordinal));
  uint64_t keep = std::numeric_limits<uint64_t>::max();  // never hand freed blocks back to the driver
  DSV4_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &keep));
  DSV4_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&err_), sizeof(int32_t)));
  DSV4_CUDA_CHECK(cudaMemset(err_, 0, sizeof(int32_t)));
}

void CudaDevice::bind_thread() { DSV4_CUDA_CHECK(cudaSetDevice(ordinal_)); }

CudaDevice::~CudaDevice() {
  abort_recording();
  cudaStreamSynchronize(side_);
  cudaStreamSynchronize(stream_);
  if (copies_ != nullptr) {
    cudaStreamSynchronize(copies_);
    cudaStreamDestroy(copies_);
    cudaEventDestroy(copies_after_);
  }
  for (const Ticket& t : tickets_) {
    cudaEventDestroy(t.start);
    cudaEventDestroy(t.end);
  }
  cudaEventDestroy(forked_);
  cudaEventDestroy(joined_);
  cudaStreamDestroy(side_);
  for (const Pinned& b : staging_) cudaFreeHost(b.p);
  for (cudaEvent_t e : marks_) cudaEventDestroy(e);
  cudaFree(err_);
  cudaStreamDestroy(stream_);
}

std::string CudaDevice::name() const {
  cudaDeviceProp prop{};
  DSV4_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
  return prop.name;
}

uint64_t CudaDevice::memory_capacity() const {
  size_t free_b = 0, total = 0;
  DSV4_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
  return total;
}

uint64_t CudaDevice::memory_free() const {
  size_t free_b = 0, total = 0;
  DSV4_CUDA_CHECK(cudaMemGetInfo(&free_b, &total));
  return free_b;
}

void* CudaDevice::allocate(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMallocAsync(&p, bytes ? bytes : 1, active_);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_b = 0, total = 0;
    cudaMemGetInfo(&free_b, &total);
    fail("cuda: out of GPU memory allocating {} bytes ({} of {} bytes free)", bytes, free_b, total);
  }
  DSV4_CUDA_CHECK(e);
  if (recording_) recorded_.insert(p);
  return p;
}

// The stream-ordered pool's own counters: every allocate() comes from it (graphs' nodes from theirs).
Device::MemoryUse CudaDevice::memory_use() const {
  uint64_t current = 0, peak = 0, reserved = 0;
  DSV4_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &current));
  DSV4_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &peak));
  DSV4_CUDA_CHECK(cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &reserved));
  return {static_cast<int64_t>(current), static_cast<int64_t>(std::max(peak, current)),  // a reset mark reads 0
          static_cast<int64_t>(reserved)};
}

void CudaDevice::reset_memory_peak() {
  uint64_t zero = 0;  // the high mark restarts from what is in use
  DSV4_CUDA_CHECK(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrUsedMemHigh, &zero));
}

void CudaDevice::release(void* p) {
  if (!p || discarded_.erase(p)) return;
  if (recording_) {
    if (recorded_.erase(p)) {
      // A free node; after a failure inside the recording the capture may be invalidated already.
      if (cudaFreeAsync(p, active_) != cudaSuccess) {
        (void)cudaGetLastError();
        broken_ = true;
      }
    } else {
      deferred_frees_.push_back(p);
      broken_ = true;
    }
    return;
  }
  DSV4_CUDA_CHECK(cudaFreeAsync(p, active_));
}

// Host-to-device copies up to this size go through pinned staging (a copy from pageable memory would
// wait for the device); larger ones (weights) go straight from the source.
constexpr size_t kStageMax = size_t{64} << 20;

void* CudaDevice::stage(size_t bytes, bool after_sync) {
  constexpr size_t kAlign = 256, kBlock = size_t{8} << 20;
  staged_ = (staged_ + kAlign - 1) / kAlign * kAlign;
  // The next block with room (blocks staged since the last synchronize() stay untouched).
  while (current_ < staging_.size() && staged_ + bytes > staging_[current_].bytes) {
    ++current_;
    staged_ = 0;
  }
  if (current_ == staging_.size()) {
    size_t held = 0;
    for (const Pinned& b : staging_) held += b.bytes;
    // Bulk uploads (the weights) would pin without bound: once the cap is held, wait for the copies in
    // flight and start over in the same blocks instead of pinning more.
    if (held + bytes > kStagingCap && !staging_.empty() && !after_sync) {
      synchronize();
      return stage(bytes, true);  // now the kept blocks are free; a larger request pins one more
    }
    Pinned b;
    b.bytes = std::max(kBlock, bytes);
    DSV4_CUDA_CHECK(cudaMallocHost(&b.p, b.bytes));
    staging_.push_back(b);
    staged_ = 0;
  }
  void* p = static_cast<uint8_t*>(staging_[current_].p) + staged_;
  staged_ += bytes;
  return p;
}

void CudaDevice::to_device(void* dst, const void* src, size_t bytes) { to_device_skipping(dst, src, bytes, {}); }

// The staging copy leaves the skipped bytes out; the one device copy still moves the whole span (what
// the skipped bytes then hold on the device is never read).
void CudaDevice::to_device_skipping(void* dst, const void* src, size_t bytes, std::span<const Range> skip) {
  if (!bytes) return;
  refuse_while_recording("a host-to-device copy");  // a replay would copy whatever staging then holds
  if (bytes > kStageMax) {                          // larger copies (weights) go straight from the source
    DSV4_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, active_));
    return;
  }
  void* pinned = stage(bytes);
  copy_around(pinned, src, bytes, skip);
  DSV4_CUDA_CHECK(cudaMemcpyAsync(dst, pinned, bytes, cudaMemcpyHostToDevice, active_));
}

void CudaDevice::to_host(void* dst, const void* src, size_t bytes) {
  refuse_while_recording("a device-to-host copy");
  // Into pageable memory the copy returns only once the stream has reached it: most of a step's wait
  // is here, not in the synchronize after it.
  const auto t0 = std::chrono::steady_clock::now();
  if (bytes) DSV4_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, active_));
  add_waited(t0);
  synchronize();
}

void CudaDevice::add_waited(std::chrono::steady_clock::time_point since) {
  waited_.fetch_add(std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count(),
                    std::memory_order_relaxed);
}

// cudaMemcpyDefault: the direction from the pointers, so pinned host pages (the KV host tier) copy too.
void CudaDevice::copy(void* dst, const void* src, size_t bytes) {
  if (bytes) DSV4_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, active_));
}

// Pages in one kernel launch (page_copy.h); a single copy (one contiguous span) by DMA.
void CudaDevice::copy_many(std::span<const Copy> copies) {
  if (copies.size() == 1) return copy(copies[0].dst, copies[0].src, copies[0].bytes);
  page_copy_kernel(copies, active_);
}

void CudaDevice::copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows) {
  if (width && rows)
    DSV4_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, rows, cudaMemcpyDefault, active_));
}

void* CudaDevice::allocate_pinned(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocDefault);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    fail("cuda: cannot pin {} bytes of host memory (--kv-offload-bytes)", bytes);
  }
  DSV4_CUDA_CHECK(e);
  return p;
}

void CudaDevice::release_pinned(void* p) {
  if (!p) return;
  DSV4_CUDA_CHECK(cudaStreamSynchronize(active_));  // copies into or out of the pages may still be queued
  DSV4_CUDA_CHECK(cudaFreeHost(p));
}

void CudaDevice::fill_zero(void* p, size_t bytes) {
  if (bytes) DSV4_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, active_));
}

void CudaDevice::refuse_while_recording(const char* what) const {
  DSV4_CHECK(!recording_, "cuda: {} while a step is being recorded (it would not be replayed)", what);
}

void CudaDevice::begin_side() {
  DSV4_CHECK(active_ == stream_, "cuda: begin_side() inside a side branch");
  DSV4_CUDA_CHECK(cudaEventRecord(forked_, stream_));
  DSV4_CUDA_CHECK(cudaStreamWaitEvent(side_, forked_, 0));
  active_ = side_;
}

void CudaDevice::end_side() {
  DSV4_CHECK(active_ == side_, "cuda: end_side() without begin_side()");
  active_ = stream_;
  DSV4_CUDA_CHECK(cudaEventRecord(joined_, side_));
}

void CudaDevice::join_side() {
  DSV4_CHECK(active_ == stream_, "cuda: join_side() inside a side branch");
  DSV4_CUDA_CHECK(cudaStreamWaitEvent(stream_, joined_, 0));
}

void CudaDevice::begin_background() {
  DSV4_CHECK(active_ == stream_, "cuda: begin_background() inside a side branch");
  refuse_while_recording("a background copy");
  if (copies_ == nullptr) {
    DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&copies_, cudaStreamNonBlocking));
    DSV4_CUDA_CHECK(cudaEventCreateWithFlags(&copies_after_, cudaEventDisableTiming));
  }
  DSV4_CUDA_CHECK(cudaEventRecord(copies_after_, stream_));
  DSV4_CUDA_CHECK(cudaStreamWaitEvent(copies_, copies_after_, 0));
  // Timed from here: after the wait, so the time is the copies' own, not the steps' before them.
  DSV4_CUDA_CHECK(cudaEventCreate(&copies_start_));
  DSV4_CUDA_CHECK(cudaEventRecord(copies_start_, copies_));
  active_ = copies_;
}

uint64_t CudaDevice::end_background() {
  DSV4_CHECK(active_ == copies_ && copies_ != nullptr, "cuda: end_background() without begin_background()");
  active_ = stream_;
  Ticket t{next_ticket_, std::exchange(copies_start_, nullptr), nullptr};
  DSV4_CUDA_CHECK(cudaEventCreate(&t.end));
  DSV4_CUDA_CHECK(cudaEventRecord(t.end, copies_));
  tickets_.push_back(t);
  return next_ticket_++;
}

bool CudaDevice::landed(uint64_t ticket) {
  while (!tickets_.empty() && ticket > landed_) {
    const Ticket& t = tickets_.front();
    const cudaError_t q = cudaEventQuery(t.end);
    if (q == cudaErrorNotReady) return false;
    DSV4_CUDA_CHECK(q);
    float ms = 0;
    DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, t.start, t.end));
    background_seconds_ += ms * 1e-3;
    landed_ = t.id;
    DSV4_CUDA_CHECK(cudaEventDestroy(t.start));
    DSV4_CUDA_CHECK(cudaEventDestroy(t.end));
    tickets_.pop_front();
  }
  return ticket <= landed_;
}

namespace {

struct CudaRecording final : Device::Recording {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~CudaRecording() override {
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
  }
};

}  // namespace

void CudaDevice::begin_recording() {
  DSV4_CHECK(!recording_ && active_ == stream_, "cuda: begin_recording() while recording or inside a side branch");
  // Thread-local mode: a forbidden call from this thread (a synchronous copy, cudaMalloc) fails the
  // capture instead of silently running.
  DSV4_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  recording_ = true;
}

std::unique_ptr<Device::Recording> CudaDevice::end_recording() {
  DSV4_CHECK(recording_ && active_ == stream_, "cuda: end_recording() without a recording, or inside a side branch");
  auto r = std::make_unique<CudaRecording>();
  recording_ = false;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &r->graph);
  if (ended != cudaSuccess) end_side_capture();
  const bool leaked = !recorded_.empty(), broken = broken_;
  finish_recording();
  DSV4_CUDA_CHECK(ended);
  DSV4_CHECK(!broken, "cuda: the recorded step freed memory it had not taken (or a free inside it failed)");
  DSV4_CHECK(!leaked, "cuda: the recorded step kept memory it took");
  DSV4_CUDA_CHECK(cudaGraphInstantiateWithFlags(&r->exec, r->graph, 0));
  return r;
}

void CudaDevice::abort_recording() noexcept {
  active_ = stream_;
  if (!recording_) return;
  recording_ = false;
  cudaGraph_t g = nullptr;
  (void)cudaStreamEndCapture(stream_, &g);  // invalidated or unjoined captures fail here: discard either way
  if (g) cudaGraphDestroy(g);
  end_side_capture();
  finish_recording();
}

// A failure inside a side branch can leave the side stream capturing after the main one ended.
void CudaDevice::end_side_capture() noexcept {
  cudaStreamCaptureStatus side = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(side_, &side) == cudaSuccess && side != cudaStreamCaptureStatusNone) {
    cudaGraph_t g = nullptr;
    (void)cudaStreamEndCapture(side_, &g);
    if (g) cudaGraphDestroy(g);
  }
  (void)cudaGetLastError();
}

void CudaDevice::finish_recording() noexcept {
  discarded_.insert(recorded_.begin(), recorded_.end());  // graph memory: never free it ourselves
  recorded_.clear();
  for (void* p : deferred_frees_) (void)cudaFreeAsync(p, stream_);
  deferred_frees_.clear();
  broken_ = false;
}

void CudaDevice::replay(const Recording& r) {
  DSV4_CHECK(!recording_ && active_ == stream_, "cuda: replay() while recording or inside a side branch");
  const auto* rec = dynamic_cast<const CudaRecording*>(&r);
  DSV4_CHECK(rec != nullptr, "cuda: replay() of a recording made elsewhere");
  DSV4_CUDA_CHECK(cudaGraphLaunch(rec->exec, stream_));
}

size_t CudaDevice::mark() {
  refuse_while_recording("a profiling mark");
  if (marks_used_ == marks_.size()) {
    cudaEvent_t e = nullptr;
    DSV4_CUDA_CHECK(cudaEventCreate(&e));
    marks_.push_back(e);
  }
  DSV4_CUDA_CHECK(cudaEventRecord(marks_[marks_used_], active_));
  return marks_used_++;
}

double CudaDevice::elapsed_ms(size_t a, size_t b) const {
  DSV4_CHECK(a < marks_used_ && b < marks_used_, "cuda: mark {} or {} not recorded", a, b);
  float ms = 0;
  DSV4_CUDA_CHECK(cudaEventElapsedTime(&ms, marks_[a], marks_[b]));
  return ms;
}

void CudaDevice::synchronize() {
  refuse_while_recording("a synchronisation");
  const auto t0 = std::chrono::steady_clock::now();
  DSV4_CUDA_CHECK(cudaStreamSynchronize(side_));
  DSV4_CUDA_CHECK(cudaStreamSynchronize(stream_));
  add_waited(t0);
  // Every staged copy has landed: the blocks are free for reuse. Keep the largest ones within the cap
  // (pinning and unpinning cost milliseconds a block) and always at least the largest.
  std::sort(staging_.begin(), staging_.end(), [](const Pinned& a, const Pinned& b) { return a.bytes > b.bytes; });
  size_t kept = 0, n = 0;
  while (n < staging_.size() && (n == 0 || kept + staging_[n].bytes <= kStagingCap)) kept += staging_[n++].bytes;
  for (size_t i = n; i < staging_.size(); ++i) DSV4_CUDA_CHECK(cudaFreeHost(staging_[i].p));
  staging_.resize(n);
  current_ = 0;
  staged_ = 0;
  check_errors();
}

void CudaDevice::check_errors() {
  int32_t code = 0;
  DSV4_CUDA_CHECK(cudaMemcpy(&code, err_, sizeof(code), cudaMemcpyDeviceToHost));
  if (code == 0) return;
  DSV4_CUDA_CHECK(cudaMemset(err_, 0, sizeof(int32_t)));
  fail("cuda: {} (device error {})", error_name(code), code);
}

bool CudaDevice::start_trace() {
  synchronize();  // earlier work stays out of the trace
  return start_kernel_trace(trace_why_);
}

std::vector<Device::KernelSpan> CudaDevice::stop_trace() {
  synchronize();
  return stop_kernel_trace(ordinal_);
}

}  // namespace dsv4::cuda
