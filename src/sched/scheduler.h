// Scheduler: continuous batching over the paged KV cache. Each step it picks a decode token for every
// running request that is decoding and prefill chunks for the others, under a token budget
// (max_num_batched_tokens) and a sequence cap (max_num_seqs), and allocates their positions in the cache.
//
// Order (FCFS, or the priority policy: runs_before): running requests in that order, then waiting ones,
// preempted and new ones merged in that order (under FCFS preempted requests come first: they arrived
// before every waiting one). A waiting
// request is admitted with its longest prefix-cache hit (those positions are not computed again). Long
// prompts are chunked: a request's chunk is limited by the budget left after the decodes of the step, by
// max_prefill_chunk, and by the chunk policy (scheduler_config.h). When blocks run out, a running
// request's prefill chunk shrinks to what fits; when nothing fits, the last running request in that order
// (the newest, or the lowest priority) is preempted (its blocks freed, recomputed later) until the request
// fits or is itself the last. While others run, a
// waiting request is admitted only when its first chunk fits whole and the full units have the blocks for
// its whole prefill (no recompute thrash); nothing is admitted in a step that preempted, so preempted
// requests resume before new ones start. A request whose prefix is still coming back from the KV host
// tier is passed over (keeping its place) until the copies land; the ones behind it may start meanwhile.
//
// Single-threaded (the engine loop). Between steps the caller reports sampled tokens (append_token),
// finishes or aborts requests (finish), and feeds measured step times (observe_step).
#pragma once

#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "kv/kv_cache_manager.h"
#include "sched/prefill_pacer.h"
#include "sched/request.h"
#include "sched/schedule.h"
#include "sched/scheduler_config.h"

namespace dsv4 {

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, KvCacheManager& kv);

  // Queues a new request. Throws dsv4::Error for a duplicate id, an empty prompt, or a priority other than 0
  // under FCFS. compute_prompt: every prompt position is computed, no prefix-cache hit stands in (its
  // logits are wanted: prompt_logprobs).
  void add(RequestId id, std::vector<int32_t> prompt, std::string cache_salt = {}, int64_t priority = 0,
           bool compute_prompt = false);
  Schedule schedule();
  // The token sampled after a chunk with sample = true.
  void append_token(RequestId id, int32_t token);
  // Ends a request in any state (finished or aborted) and frees its blocks. False when unknown.
  bool finish(RequestId id);
  void observe_step(const Schedule& s, double seconds) {
    pacer_.observe(s.num_decode_tokens, s.num_prefill_tokens, seconds);
  }

  const SchedRequest* find(RequestId id) const;
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(preempted_.size() + waiting_.size()); }
  int64_t num_preempted_waiting() const { return static_cast<int64_t>(preempted_.size()); }
  uint64_t num_preemptions() const { return preemptions_; }
  bool has_work() const { return !running_.empty() || num_waiting() > 0; }
  // The request admission would try next (preempted ones first); 0 when none waits.
  RequestId next_waiting() const;
  // Whether `s` (just scheduled) shows the next waiting request can never run: nothing ran, nothing runs,
  // nothing was preempted and no host-tier restore is on its way (one that lands may let it in).
  bool stuck(const Schedule& s) const {
    return s.empty() && running_.empty() && s.preempted.empty() && kv_.restores_in_flight() == 0;
  }
  std::span<SchedRequest* const> running() const { return running_; }
  const SchedulerConfig& config() const { return cfg_; }
  const PrefillPacer& pacer() const { return pacer_; }

 private:
  struct Step;

  void schedule_running(Step& st);
  enum class Admit { kAdmitted, kNoRoom, kRestoring };
  void admit_waiting(Step& st);
  Admit admit(Step& st, SchedRequest& r);
  int64_t prefill_budget(int64_t decodes) const;
  int64_t chunk_limit(const Step& st) const;
  bool full_blocks_free_for(const SchedRequest& r, const PrefixHit& hit) const;
  int64_t largest_fit(const SchedRequest& r, int64_t n, const PrefixHit* hit) const;
  void add_chunk(Step& st, SchedRequest& r, int64_t n, bool decode);
  void preempt(Step& st, SchedRequest& r);
  // Whether the request admission tries next is preempted_'s front rather than waiting_'s.
  bool preempted_next() const;
  void remove_from_queues(SchedRequest* r);

  SchedulerConfig cfg_;
  KvCacheManager& kv_;
  PrefillPacer pacer_;
  std::unordered_map<RequestId, std::unique_ptr<SchedRequest>> requests_;
  // Each in runs_before order.
  std::vector<SchedRequest*> running_;
  std::deque<SchedRequest*> preempted_;
  std::deque<SchedRequest*> waiting_;
  uint64_t next_arrival_ = 0;
  uint64_t preemptions_ = 0;
};

}  // namespace dsv4
