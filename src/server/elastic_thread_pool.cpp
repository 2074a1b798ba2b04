#include "server/elastic_thread_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace dsv4::server {

ElasticThreadPool::ElasticThreadPool(size_t min_threads, size_t max_threads)
    : max_threads_(std::max<size_t>(1, max_threads)) {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < std::min(min_threads, max_threads_); ++i) start_thread();
}

ElasticThreadPool::~ElasticThreadPool() { shutdown(); }

void ElasticThreadPool::start_thread() {
  threads_.emplace_back([this] { work(); });
}

void ElasticThreadPool::enqueue(std::function<void()> fn) {
  {
    std::lock_guard lock(mu_);
    jobs_.push_back(std::move(fn));
    if (idle_ < jobs_.size()) {
      if (threads_.size() < max_threads_) {
        start_thread();
      } else if (!warned_) {
        warned_ = true;  // once: under overload this would repeat for every connection
        spdlog::warn("http: all {} connection threads are busy; new connections wait", max_threads_);
      }
    }
  }
  cv_.notify_one();
}

void ElasticThreadPool::shutdown() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    shutdown_ = true;
    threads.swap(threads_);
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
}

size_t ElasticThreadPool::threads() const {
  std::lock_guard lock(mu_);
  return threads_.size();
}

void ElasticThreadPool::work() {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mu_);
      ++idle_;
      cv_.wait(lock, [&] { return shutdown_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // shut down and drained
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace dsv4::server
