// HostWorker: a thread that runs one piece of host work beside the caller. The model runner makes a
// step's sample inputs (a structured-output row's grammar mask may walk the token trie the first time it
// meets a position) on it while the step's forward runs on the caller's thread, so the masks are off the
// critical path on the CUDA backend (the forward is queued) and the CPU one (the forward computes) alike.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace dsv4 {

class HostWorker {
 public:
  HostWorker();
  ~HostWorker();
  HostWorker(const HostWorker&) = delete;
  HostWorker& operator=(const HostWorker&) = delete;

  // Runs `side` on the worker while `main` runs here; returns main's result once both are done. What
  // main throws wins (side is waited for first, its error dropped); else what side threw is rethrown.
  template <class Main>
  auto beside(std::function<void()> side, Main&& main) {
    start(std::move(side));
    try {
      auto result = main();
      wait();
      return result;
    } catch (...) {
      wait_quietly();
      throw;
    }
  }

 private:
  void start(std::function<void()> work);
  void wait();  // rethrows the work's error
  void wait_quietly() noexcept;
  void run();

  std::mutex mu_;
  std::condition_variable cv_;
  std::function<void()> work_;
  bool busy_ = false, stop_ = false;
  std::exception_ptr error_;
  std::thread thread_;  // last: started once the rest is built
};

}  // namespace dsv4
