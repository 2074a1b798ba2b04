// StepLockstep: the data-parallel replicas of an expert-parallel engine step together. Their ranks meet
// in the MoE's expert exchange every layer of every step, so when any replica has a batch, every other
// replica steps too: with no tokens of its own, its ranks still run the experts they own over the rows
// the others send (Executor::idle_step). Each replica's loop arrives once per iteration saying whether
// it has a batch, whether it has work at all (a request waiting, e.g. for blocks a restore brings back)
// and whether it was asked to stop; all of them leave with the same decision.
//
// The front end notes work it hands any replica (note_work) before waking them all. A replica may
// take that wake before the work reaches its peer's inbox and arrive with nothing, so a gate is also
// busy when work was noted since the gate before it; work noted after a gate's decision wakes the
// replicas asleep after it (noted_since its epoch). Either way every replica comes back to the gate
// that the one holding the new work arrives at.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace dsv4 {

class StepLockstep {
 public:
  explicit StepLockstep(int replicas);

  struct Decision {
    bool step = false;   // some replica has a batch: every replica steps, empty ones idle
    bool busy = false;   // some replica has work: every replica comes back at once (none may sleep)
    bool stop = false;   // some replica was asked to stop: every one stops (none is left in a collective)
    uint64_t epoch = 0;  // the work noted when it was made
  };
  // Blocks until every replica has arrived for this iteration.
  Decision arrive(bool has_batch, bool has_work, bool stop);
  // Work handed to a replica (a request, an abort): noted before the replicas are woken.
  void note_work();
  // Whether work was noted after the decision of that epoch was made.
  bool noted_since(uint64_t epoch);

  int replicas() const { return replicas_; }

 private:
  const int replicas_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  uint64_t noted_ = 0;  // work noted so far
  Decision forming_, decided_;
};

}  // namespace dsv4
