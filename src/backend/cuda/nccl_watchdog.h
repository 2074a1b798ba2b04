// NcclWatchdog: what keeps a rank whose peer died from waiting forever inside an NCCL kernel. NCCL's
// kernels spin until the peer's data arrives, so the watchdog follows every collective a communicator
// enqueues (an event recorded after it) and, from its own thread, fires when one has not finished
// within the timeout or when NCCL reports an asynchronous error; the communicator then aborts, which
// ends the spinning kernels, and its next call throws the reason. Collectives recorded into a CUDA
// graph are not followed (their replays are the graph's).
#pragma once

#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dsv4::cuda {

class NcclWatchdog {
 public:
  // check(): "" or the asynchronous error NCCL reports; fire(reason): called once, on the watchdog's
  // thread, with neither the watchdog's lock held.
  NcclWatchdog(int ordinal, std::chrono::milliseconds timeout, std::function<std::string()> check,
               std::function<void(const std::string&)> fire);
  ~NcclWatchdog();
  NcclWatchdog(const NcclWatchdog&) = delete;
  NcclWatchdog& operator=(const NcclWatchdog&) = delete;

  // Follows the collective just enqueued on `stream`.
  void watch(const char* what, cudaStream_t stream);

 private:
  struct Pending {
    cudaEvent_t done;
    const char* what;
    uint64_t number;
    std::chrono::steady_clock::time_point since;
  };

  void run();
  // Drops the finished collectives; the reason to fire ("" for none).
  std::string overdue();

  const int ordinal_;
  const std::chrono::milliseconds timeout_;
  std::function<std::string()> check_;
  std::function<void(const std::string&)> fire_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> pending_;
  std::vector<cudaEvent_t> spare_;  // events of finished collectives, reused
  uint64_t watched_ = 0;
  bool stop_ = false, fired_ = false;
  std::thread thread_;  // last: starts once the rest is there
};

}  // namespace dsv4::cuda
