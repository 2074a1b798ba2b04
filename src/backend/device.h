// Device: where a backend's buffers live (host memory for the CPU backend, GPU memory for CUDA).
// The model allocates its activations and index arrays through it and copies host-built index
// arrays (slots, positions) in; everything else stays on the device.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace dsv4 {

class Device {
 public:
  virtual ~Device() = default;
  // True when device pointers are host pointers (no copies needed to read them on the host).
  virtual bool host_memory() const = 0;
  // Bytes of memory the device has in all (physical RAM for the host).
  virtual uint64_t memory_capacity() const = 0;
  // Bytes it could still allocate now (the host: its available physical RAM).
  virtual uint64_t memory_free() const = 0;
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  // What allocate() holds now and the most it held since reset_memory_peak(), and the memory the allocator
  // keeps for them (freed blocks stay with it), in bytes; -1 where the device does not count (the host).
  // Tools read a step's activations as peak - current before it.
  struct MemoryUse {
    int64_t current = -1, peak = -1, reserved = -1;
  };
  virtual MemoryUse memory_use() const { return {}; }
  virtual void reset_memory_peak() {}
  virtual void to_device(void* dst, const void* src, size_t bytes) = 0;
  // to_device, where the bytes of `skip` (ascending, disjoint [begin, end) ranges) are never read on the
  // device: their device bytes may keep what they held or take anything. A copy through host staging then
  // moves only the rest (a padded step's upload is mostly rows no one writes or reads).
  struct Range {
    size_t begin = 0, end = 0;
  };
  virtual void to_device_skipping(void* dst, const void* src, size_t bytes, std::span<const Range> skip) {
    (void)skip;
    to_device(dst, src, bytes);
  }
  // Copies back; returns when dst holds the data (all earlier work on the device finished).
  virtual void to_host(void* dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // device to device
  // `rows` rows of `width` bytes, src rows src_pitch bytes apart into dst rows dst_pitch apart (device to
  // device): one call where a gathered shard's columns interleave into whole rows.
  virtual void copy_2d(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows) {
    for (size_t r = 0; r < rows; ++r)
      copy(static_cast<char*>(dst) + r * dst_pitch, static_cast<const char*>(src) + r * src_pitch, width);
  }
  // Independent copies (no two overlap; they may run in any order), in one call where the device has
  // one: the KV host tier's layer pages, hundreds of a few KB each per prefix.
  struct Copy {
    void* dst;
    const void* src;
    size_t bytes;
  };
  virtual void copy_many(std::span<const Copy> copies) {
    for (const Copy& c : copies) copy(c.dst, c.src, c.bytes);
  }
  // Host memory the device copies to and from without staging (page-locked on a GPU), for the KV host
  // tier; copy() moves bytes between it and device memory in either direction, in the device's order.
  virtual void* allocate_pinned(size_t bytes) { return allocate(bytes); }
  virtual void release_pinned(void* p) { release(p); }
  virtual void fill_zero(void* p, size_t bytes) = 0;
  // Waits for all queued work; throws if a kernel reported an error.
  virtual void synchronize() = 0;
  // Host time spent blocked in synchronize() (copies back to the host end in one), summed: over a step,
  // what the host waited for the device, the rest of the step being host work. 0 where the work runs on
  // the calling thread (nothing to wait for).
  virtual double waited_seconds() const { return 0; }
  // Makes this device the calling thread's (CUDA: its GPU current). A thread that works on a device it
  // did not make (a rank's thread) calls it first.
  virtual void bind_thread() {}

  // Kernel timeline: between start_trace() and stop_trace() the device notes each kernel's start and end
  // on its own clock, graph replays included, without waiting between them (unlike marks, which
  // serialize eager ops). start_trace() is false where the device keeps no such record (the CPU; a GPU
  // whose tracing library is missing: why, in trace_unavailable()). stop_trace() waits for the device.
  struct KernelSpan {
    std::string name;  // the kernel's symbol as the device reports it (kernel_timeline.h shortens it)
    uint64_t start_ns = 0, end_ns = 0;
    uint32_t stream = 0;
  };
  virtual bool start_trace() { return false; }
  virtual std::vector<KernelSpan> stop_trace() { return {}; }
  virtual std::string trace_unavailable() const { return "this device keeps no kernel timeline"; }

  // Profiling marks: mark() records a point in the device's work queue; after synchronize(),
  // elapsed_ms(a, b) is the device time between two marks. The default reads the host clock, which
  // is right for devices whose work has finished when a call returns.
  virtual size_t mark() {
    host_marks_.push_back(std::chrono::steady_clock::now());
    return host_marks_.size() - 1;
  }
  virtual double elapsed_ms(size_t a, size_t b) const {
    return std::chrono::duration<double, std::milli>(host_marks_.at(b) - host_marks_.at(a)).count();
  }
  virtual void clear_marks() { host_marks_.clear(); }

  // Side queue: between begin_side() and end_side() the device's work goes to a second queue that
  // starts after everything enqueued before begin_side(); the main queue goes on meanwhile, and
  // join_side() makes its later work wait for the side queue's. Memory taken inside the branch is
  // released inside it. A device with one queue simply runs everything in order.
  virtual void begin_side() {}
  virtual void end_side() {}
  virtual void join_side() {}

  // Background copies: between begin_background() and end_background() copy() goes to a queue of its
  // own that starts after everything enqueued on the main queue so far and runs beside the later steps;
  // end_background() returns a ticket (0: the copies are already in place), and landed(ticket) says,
  // without waiting, whether they and every earlier background copy are complete. Nothing else orders
  // the main queue after them: the caller keeps their bytes unread and their sources untouched until
  // landed. A device with one queue copies in order and returns 0.
  // background_seconds(): the device time the landed batches took, summed (each from its first copy
  // starting to its last ending); 0 where copies are in place when end_background() returns.
  virtual void begin_background() {}
  virtual uint64_t end_background() { return 0; }
  virtual bool landed(uint64_t ticket) { return ticket == 0; }
  virtual double background_seconds() const { return 0; }

  // Recording (CUDA graphs): between begin_recording() and end_recording() work is recorded instead of
  // run; replay() runs the recording again with the same pointers and sizes. Host copies, waits and
  // marks are refused while recording (they would not be replayed). Devices that cannot record say so.
  class Recording {
   public:
    virtual ~Recording() = default;
  };
  virtual bool can_record() const { return false; }
  virtual void begin_recording() { throw std::logic_error("this device cannot record"); }
  // Throws when something in the recorded work failed; the device is then back to running eagerly.
  virtual std::unique_ptr<Recording> end_recording() { throw std::logic_error("this device cannot record"); }
  // Ends a recording after a failure, discarding it (no-op when none is in progress).
  virtual void abort_recording() noexcept {}
  virtual void replay(const Recording&) { throw std::logic_error("this device cannot record"); }

 private:
  std::vector<std::chrono::steady_clock::time_point> host_marks_;
};

// memcpy of [0, bytes) but the ranges of `skip` (ascending, disjoint).
inline void copy_around(void* dst, const void* src, size_t bytes, std::span<const Device::Range> skip) {
  size_t at = 0;
  for (const Device::Range& r : skip) {
    if (r.begin > at) std::memcpy(static_cast<char*>(dst) + at, static_cast<const char*>(src) + at, r.begin - at);
    at = std::max(at, r.end);
  }
  if (bytes > at) std::memcpy(static_cast<char*>(dst) + at, static_cast<const char*>(src) + at, bytes - at);
}

class HostDevice final : public Device {
 public:
  bool host_memory() const override { return true; }
  uint64_t memory_capacity() const override {
    return static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
  }
  uint64_t memory_free() const override {
    return static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<uint64_t>(sysconf(_SC_PAGE_SIZE));
  }
  void* allocate(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p && bytes) throw std::bad_alloc();
    return p;
  }
  void release(void* p) override { std::free(p); }
  void to_device(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void to_device_skipping(void* dst, const void* src, size_t bytes, std::span<const Range> skip) override {
    copy_around(dst, src, bytes, skip);
  }
  void to_host(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void fill_zero(void* p, size_t bytes) override { std::memset(p, 0, bytes); }
  void synchronize() override {}
};

// An owning typed array on a device.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(Device& d, size_t n) : dev_(&d), n_(n), p_(static_cast<T*>(d.allocate(n * sizeof(T)))) {}
  DeviceArray(Device& d, const std::vector<T>& host) : DeviceArray(d, host.size()) {
    if (!host.empty()) d.to_device(p_, host.data(), host.size() * sizeof(T));
  }
  ~DeviceArray() {
    if (p_) dev_->release(p_);
  }
  DeviceArray(DeviceArray&& o) noexcept : dev_(o.dev_), n_(o.n_), p_(o.p_) { o.p_ = nullptr; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    std::swap(dev_, o.dev_);
    std::swap(n_, o.n_);
    std::swap(p_, o.p_);
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* data() const { return p_; }
  size_t size() const { return n_; }
  std::vector<T> to_host() const {
    std::vector<T> h(n_);
    if (n_) dev_->to_host(h.data(), p_, n_ * sizeof(T));
    return h;
  }

 private:
  Device* dev_ = nullptr;
  size_t n_ = 0;
  T* p_ = nullptr;
};

}  // namespace dsv4
