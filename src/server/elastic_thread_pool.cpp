#include "server/elastic_thread_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace dsv4::server {

ElasticThreadPool::ElasticThreadPool(std::string name, size_t min_threads, size_t max_threads,
                                     std::chrono::milliseconds idle_timeout)
    : name_(std::move(name)),
      min_threads_(std::min(min_threads, std::max<size_t>(1, max_threads))),
      max_threads_(std::max<size_t>(1, max_threads)),
      idle_timeout_(idle_timeout) {
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < min_threads_; ++i) start_thread();
}

ElasticThreadPool::~ElasticThreadPool() { shutdown(); }

void ElasticThreadPool::start_thread() {
  threads_.emplace_back();
  const auto self = std::prev(threads_.end());
  *self = std::thread([this, self] { work(self); });
}

bool ElasticThreadPool::enqueue(std::function<void()> fn) {
  join_exited();
  {
    std::lock_guard lock(mu_);
    if (shutdown_) return false;
    jobs_.push_back(std::move(fn));
    if (idle_ < jobs_.size()) {
      if (threads_.size() < max_threads_) {
        start_thread();
      } else if (!warned_) {
        warned_ = true;  // once: under overload this would repeat for every request
        spdlog::warn("{}: all {} threads are busy; new requests wait", name_, max_threads_);
      }
    }
  }
  cv_.notify_one();
  return true;
}

void ElasticThreadPool::shutdown() {
  std::list<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    shutdown_ = true;
    threads.swap(threads_);  // the threads still find themselves: list nodes move with the splice
  }
  cv_.notify_all();
  for (std::thread& t : threads) t.join();
  join_exited();
}

size_t ElasticThreadPool::threads() const {
  std::lock_guard lock(mu_);
  return threads_.size();
}

void ElasticThreadPool::join_exited() {
  std::vector<std::thread> exited;
  {
    std::lock_guard lock(mu_);
    exited.swap(exited_);
  }
  for (std::thread& t : exited) t.join();  // they have left work(); joining only reaps them
}

void ElasticThreadPool::work(std::list<std::thread>::iterator self) {
  for (;;) {
    std::function<void()> job;
    {
      std::unique_lock lock(mu_);
      ++idle_;
      const bool woke = cv_.wait_for(lock, idle_timeout_, [&] { return shutdown_ || !jobs_.empty(); });
      --idle_;
      if (!woke && !shutdown_ && threads_.size() > min_threads_) {
        exited_.push_back(std::move(*self));  // idle too long: return the thread
        threads_.erase(self);
        return;
      }
      if (jobs_.empty()) {
        if (shutdown_) return;  // shut down and drained
        continue;
      }
      job = std::move(jobs_.front());
      jobs_.pop_front();
    }
    job();
  }
}

}  // namespace dsv4::server
