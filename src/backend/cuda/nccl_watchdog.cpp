#include "backend/cuda/nccl_watchdog.h"

#include <fmt/format.h>

#include "backend/cuda/cuda_check.h"

namespace dsv4::cuda {

namespace {

constexpr auto kPoll = std::chrono::milliseconds(20);

}  // namespace

NcclWatchdog::NcclWatchdog(int ordinal, std::chrono::milliseconds timeout, std::function<std::string()> check,
                           std::function<void(const std::string&)> fire)
    : ordinal_(ordinal), timeout_(timeout), check_(std::move(check)), fire_(std::move(fire)), thread_([this] {
        run();
      }) {}

NcclWatchdog::~NcclWatchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  for (const Pending& p : pending_) cudaEventDestroy(p.done);  // released by the driver once it has happened
  for (cudaEvent_t e : spare_) cudaEventDestroy(e);
}

void NcclWatchdog::watch(const char* what, cudaStream_t stream) {
  std::lock_guard lock(mu_);
  cudaEvent_t e = nullptr;
  if (spare_.empty()) {
    DSV4_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  } else {
    e = spare_.back();
    spare_.pop_back();
  }
  DSV4_CUDA_CHECK(cudaEventRecord(e, stream));
  pending_.push_back({e, what, ++watched_, std::chrono::steady_clock::now()});
}

std::string NcclWatchdog::overdue() {
  std::lock_guard lock(mu_);
  while (!pending_.empty() && cudaEventQuery(pending_.front().done) != cudaErrorNotReady) {
    spare_.push_back(pending_.front().done);
    pending_.pop_front();
  }
  if (fired_ || pending_.empty()) return "";
  const Pending& p = pending_.front();
  if (std::chrono::steady_clock::now() - p.since < timeout_) return "";
  return fmt::format("{} (collective #{}) has not finished within {} ms: a rank failed or stopped", p.what, p.number,
                     timeout_.count());
}

void NcclWatchdog::run() {
  cudaSetDevice(ordinal_);  // the events' GPU, for this thread
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, kPoll, [this] { return stop_; })) {
    if (fired_) continue;
    lock.unlock();
    std::string why = overdue();
    if (why.empty()) why = check_();
    if (!why.empty()) fire_(why);
    lock.lock();
    fired_ = fired_ || !why.empty();
  }
}

}  // namespace dsv4::cuda
