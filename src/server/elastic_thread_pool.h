// The threads that run request handlers. A handler may hold its thread for a long time (a streaming
// response holds it until the stream ends), so a fixed pool either wastes threads or makes request N+1 wait
// unanswered behind N streams. This pool keeps `min_threads`, adds one whenever a job arrives with no idle
// thread, up to `max_threads` (beyond that jobs queue), and lets a thread above the minimum exit after
// `idle_timeout` without work, so the threads a burst started are returned after it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace dsv4::server {

class ElasticThreadPool {
 public:
  // `name` is for the log ("http" -> "http: all N threads are busy").
  ElasticThreadPool(std::string name, size_t min_threads, size_t max_threads, std::chrono::milliseconds idle_timeout);
  ~ElasticThreadPool();
  ElasticThreadPool(const ElasticThreadPool&) = delete;
  ElasticThreadPool& operator=(const ElasticThreadPool&) = delete;

  // False after shutdown (the job is dropped).
  bool enqueue(std::function<void()> fn);
  // Runs the queued jobs, then joins every thread.
  void shutdown();

  size_t threads() const;

 private:
  void start_thread();  // mu_ held
  void work(std::list<std::thread>::iterator self);
  void join_exited();  // mu_ not held

  const std::string name_;
  const size_t min_threads_, max_threads_;
  const std::chrono::milliseconds idle_timeout_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::list<std::thread> threads_;   // running; a list, so that a thread can find and remove itself
  std::vector<std::thread> exited_;  // left after idling, to be joined
  size_t idle_ = 0;
  bool shutdown_ = false;
  bool warned_ = false;
};

}  // namespace dsv4::server
