// The bounded waiting queue: generation requests are admitted while the engine requests in flight stay
// within max_num_seqs running plus max_waiting_requests waiting; beyond that the server answers 503
// rather than queue without bound. Counts are the server's own, exact at once (the engine's stats lag a
// step). When KV space rather than max_num_seqs limits the running requests, more of the admitted ones wait,
// but never more than max_num_seqs + max_waiting_requests in all.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>

namespace dsv4::server {

class Admission {
 public:
  Admission(int64_t max_running, int64_t max_waiting) : max_running_(max_running), max_waiting_(max_waiting) {}

  // Reserves `n` engine requests for one HTTP request; false when the queue would overflow.
  bool try_acquire(int64_t n);
  void release(int64_t n);

  int64_t engine_requests() const;
  int64_t http_requests() const;
  int64_t capacity() const { return max_running_ + max_waiting_; }

 private:
  const int64_t max_running_, max_waiting_;
  mutable std::mutex mu_;
  int64_t engine_requests_ = 0;
  int64_t http_requests_ = 0;
};

// Releases what it acquired when it goes.
class AdmissionTicket {
 public:
  AdmissionTicket(Admission& a, int64_t n) : a_(&a), n_(n) {}
  ~AdmissionTicket() {
    if (a_ != nullptr) a_->release(n_);
  }
  AdmissionTicket(const AdmissionTicket&) = delete;
  AdmissionTicket& operator=(const AdmissionTicket&) = delete;

 private:
  Admission* a_;
  int64_t n_;
};

}  // namespace dsv4::server
