#include "engine/step_lockstep.h"

#include "core/error.h"

namespace dsv4 {

StepLockstep::StepLockstep(int replicas) : replicas_(replicas) {
  DSV4_CHECK(replicas >= 1, "step lockstep: {} replicas", replicas);
}

StepLockstep::Decision StepLockstep::arrive(bool has_batch, bool has_work, bool stop) {
  std::unique_lock lock(mu_);
  forming_.step = forming_.step || has_batch;
  forming_.busy = forming_.busy || has_batch || has_work;
  forming_.stop = forming_.stop || stop;
  if (++arrived_ == replicas_) {
    forming_.busy = forming_.busy || noted_ != decided_.epoch;  // work noted since the last gate
    forming_.epoch = noted_;
    decided_ = forming_;
    forming_ = {};
    arrived_ = 0;
    ++generation_;
    cv_.notify_all();
    return decided_;
  }
  const uint64_t mine = generation_;
  cv_.wait(lock, [&] { return generation_ != mine; });
  return decided_;
}

void StepLockstep::note_work() {
  std::lock_guard lock(mu_);
  ++noted_;
}

bool StepLockstep::noted_since(uint64_t epoch) {
  std::lock_guard lock(mu_);
  return noted_ != epoch;
}

}  // namespace dsv4
