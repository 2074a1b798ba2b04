#include "core/thread_pool.h"

#include <algorithm>

namespace dsv4 {
namespace {

// Set on pool workers and on a caller while it runs chunks, so nested calls run inline.
thread_local bool t_inside_pool = false;

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  workers_.reserve(static_cast<size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunk(int chunk, int chunks) {
  const int64_t begin = job_n_ * chunk / chunks;
  const int64_t end = job_n_ * (chunk + 1) / chunks;
  if (begin >= end) return;
  try {
    (*job_)(begin, end);
  } catch (...) {
    std::lock_guard lock(mu_);
    if (!error_) error_ = std::current_exception();
  }
}

void ThreadPool::worker_loop(int index) {
  t_inside_pool = true;
  uint64_t seen = 0;
  for (;;) {
    int chunks = 0;
    {
      std::unique_lock lock(mu_);
      start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      chunks = job_chunks_;
    }
    if (index < chunks) run_chunk(index, chunks);
    {
      std::lock_guard lock(mu_);
      if (--pending_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(1, min_chunk);
  const int chunks = static_cast<int>(std::min<int64_t>(size(), (n + min_chunk - 1) / min_chunk));
  std::unique_lock submit(submit_mu_, std::defer_lock);
  if (chunks <= 1 || t_inside_pool || !submit.try_lock()) {
    fn(0, n);  // same elements, same per-element arithmetic: only the schedule differs
    return;
  }
  {
    std::lock_guard lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_chunks_ = chunks;
    pending_ = static_cast<int>(workers_.size());
    error_ = nullptr;
    ++generation_;
  }
  start_cv_.notify_all();
  t_inside_pool = true;
  run_chunk(0, chunks);
  t_inside_pool = false;
  std::exception_ptr error;
  {
    std::unique_lock lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    error = error_;
    error_ = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace dsv4
