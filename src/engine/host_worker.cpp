#include "engine/host_worker.h"

#include <utility>

#include "core/error.h"

namespace dsv4 {

HostWorker::HostWorker() : thread_([this] { run(); }) {}

HostWorker::~HostWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HostWorker::start(std::function<void()> work) {
  std::lock_guard<std::mutex> lock(mu_);
  DSV4_CHECK(!busy_, "host worker: work started while the last is running");
  work_ = std::move(work);
  error_ = nullptr;
  busy_ = true;
  cv_.notify_all();
}

void HostWorker::wait_quietly() noexcept {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !busy_; });
}

void HostWorker::wait() {
  wait_quietly();
  std::lock_guard<std::mutex> lock(mu_);
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void HostWorker::run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || busy_; });
    if (busy_) {
      std::function<void()> work = std::move(work_);
      lock.unlock();
      std::exception_ptr error;
      try {
        work();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      error_ = error;
      busy_ = false;
      cv_.notify_all();
    }
    if (stop_) return;
  }
}

}  // namespace dsv4
