// ThreadPool: a fixed set of std::threads running parallel_for over a range with a static partition.
// The partition depends only on the range and the thread count, never on timing, so work that keeps
// each element's arithmetic independent of its chunk gives the same bits with any number of threads.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dsv4 {

class ThreadPool {
 public:
  // threads <= 0 means std::thread::hardware_concurrency(). The caller's thread counts as one:
  // a pool of size 1 starts no thread and runs everything inline.
  explicit ThreadPool(int threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(begin, end) on contiguous chunks covering [0, n): chunk i of c is [n*i/c, n*(i+1)/c) with
  // c = min(size(), ceil(n / min_chunk)). Blocks until all chunks finish; rethrows the first exception.
  // Calls made from inside a chunk (nested) or while another call is running run inline, serially.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk = 1);

 private:
  void worker_loop(int index);
  void run_chunk(int chunk, int chunks);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable start_cv_;
  std::condition_variable done_cv_;
  std::mutex submit_mu_;  // one parallel_for at a time
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_chunks_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
};

}  // namespace dsv4
