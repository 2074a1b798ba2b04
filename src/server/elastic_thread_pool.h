// The HTTP server's task queue. cpp-httplib 0.11.4 keeps one thread per connection for the whole
// response (a streaming response holds it until the stream ends) and its own ThreadPool has a fixed size,
// so a fixed pool either wastes threads or makes connection N+1 wait unanswered behind N streams.
// This pool starts `min_threads` and adds one whenever a job arrives with no idle thread, up to
// `max_threads`; beyond that jobs queue. Threads live until shutdown.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dsv4::server {

class ElasticThreadPool final : public httplib::TaskQueue {
 public:
  ElasticThreadPool(size_t min_threads, size_t max_threads);
  ~ElasticThreadPool() override;

  void enqueue(std::function<void()> fn) override;
  // Runs the queued jobs, then joins every thread.
  void shutdown() override;

  size_t threads() const;

 private:
  void start_thread();  // mu_ held
  void work();

  const size_t max_threads_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool shutdown_ = false;
  bool warned_ = false;
};

}  // namespace dsv4::server
