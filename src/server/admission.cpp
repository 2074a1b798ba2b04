#include "server/admission.h"

namespace dsv4::server {

bool Admission::try_acquire(int64_t n) {
  std::lock_guard lock(mu_);
  if (engine_requests_ + n > max_running_ + max_waiting_) return false;
  engine_requests_ += n;
  ++http_requests_;
  return true;
}

void Admission::release(int64_t n) {
  std::lock_guard lock(mu_);
  engine_requests_ -= n;
  --http_requests_;
}

int64_t Admission::engine_requests() const {
  std::lock_guard lock(mu_);
  return engine_requests_;
}

int64_t Admission::http_requests() const {
  std::lock_guard lock(mu_);
  return http_requests_;
}

}  // namespace dsv4::server
