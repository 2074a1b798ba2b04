#include "sched/scheduler.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {
namespace {

// Inserts r after every queued request that runs before it.
template <typename Queue>
void insert_in_order(Queue& q, SchedRequest* r) {
  q.insert(std::upper_bound(q.begin(), q.end(), r,
                            [](const SchedRequest* a, const SchedRequest* b) { return runs_before(*a, *b); }),
           r);
}

}  // namespace

// What one schedule() call has left to give out.
struct Scheduler::Step {
  Schedule out;
  int64_t budget = 0;        // tokens left in the step
  int64_t reserved = 0;      // one token for each decode not yet scheduled
  int64_t prefill_left = 0;  // prefill tokens left under the chunk policy
};

Scheduler::Scheduler(SchedulerConfig config, KvCacheManager& kv)
    : cfg_(config), kv_(kv), pacer_(config.itl_slack, config.itl_target_ms / 1e3) {
  DSV4_CHECK(cfg_.max_num_seqs > 0, "scheduler: max_num_seqs must be positive, got {}", cfg_.max_num_seqs);
  DSV4_CHECK(cfg_.max_num_batched_tokens > 0, "scheduler: max_num_batched_tokens must be positive, got {}",
             cfg_.max_num_batched_tokens);
  DSV4_CHECK(cfg_.max_prefill_chunk >= 0, "scheduler: max_prefill_chunk must not be negative, got {}",
             cfg_.max_prefill_chunk);
  DSV4_CHECK(cfg_.itl_slack > 0, "scheduler: itl_slack must be positive, got {}", cfg_.itl_slack);
  DSV4_CHECK(cfg_.itl_target_ms >= 0, "scheduler: itl_target_ms must not be negative, got {}", cfg_.itl_target_ms);
}

void Scheduler::add(RequestId id, std::vector<int32_t> prompt, std::string cache_salt, int64_t priority,
                    bool compute_prompt) {
  DSV4_CHECK(!prompt.empty(), "scheduler: request {} has an empty prompt", id);
  DSV4_CHECK(!requests_.count(id), "scheduler: request {} already exists", id);
  DSV4_CHECK(priority == 0 || cfg_.scheduling == SchedulingPolicy::kPriority,
             "scheduler: request {} has priority {}, but the scheduling policy is fcfs", id, priority);
  auto r = std::make_unique<SchedRequest>();
  r->id = id;
  r->prompt_len = static_cast<int64_t>(prompt.size());
  r->tokens = std::move(prompt);
  r->arrival = next_arrival_++;
  r->cache_salt = std::move(cache_salt);
  r->priority = priority;
  r->compute_prompt = compute_prompt;
  insert_in_order(waiting_, r.get());
  requests_.emplace(id, std::move(r));
}

Schedule Scheduler::schedule() {
  kv_.poll_restores();
  Step st;
  st.budget = cfg_.max_num_batched_tokens;
  const auto decodes =
      std::count_if(running_.begin(), running_.end(), [](const SchedRequest* r) { return r->decoding(); });
  st.reserved = std::min<int64_t>(decodes, st.budget);
  st.prefill_left = prefill_budget(decodes);
  schedule_running(st);
  if (st.out.preempted.empty()) admit_waiting(st);
  return std::move(st.out);
}

int64_t Scheduler::prefill_budget(int64_t decodes) const {
  if (cfg_.policy == ChunkPolicy::kLatency && decodes > 0) {
    return pacer_.wants_decode_only_step() ? 0 : std::min(cfg_.max_num_batched_tokens, pacer_.chunk());
  }
  return cfg_.max_num_batched_tokens;
}

int64_t Scheduler::chunk_limit(const Step& st) const {
  int64_t n = std::min(st.prefill_left, st.budget - st.reserved);
  if (cfg_.max_prefill_chunk > 0) n = std::min(n, cfg_.max_prefill_chunk);
  return n;
}

void Scheduler::schedule_running(Step& st) {
  // Victims come off the back, so every request before index i keeps its place.
  for (size_t i = 0; i < running_.size(); ++i) {
    SchedRequest& r = *running_[i];
    const bool decode = r.decoding();
    if (decode && st.reserved > 0) --st.reserved;  // its token is given out now (or, past the budget, dropped)
    const int64_t n = decode ? std::min<int64_t>(1, st.budget) : std::min(r.pending(), chunk_limit(st));
    if (n <= 0) continue;
    for (;;) {
      const int64_t fit = largest_fit(r, n, nullptr);
      if (fit > 0) {
        DSV4_CHECK(kv_.allocate(r.id, fit, r.tokens), "scheduler: request {} lost room for {} positions", r.id, fit);
        add_chunk(st, r, fit, decode);
        break;
      }
      SchedRequest* victim = running_.back();
      if (victim != &r && victim->decoding() && st.reserved > 0) --st.reserved;  // it had not been reached yet
      preempt(st, *victim);
      if (victim == &r) break;
    }
  }
}

bool Scheduler::preempted_next() const {
  return !preempted_.empty() && (waiting_.empty() || !runs_before(*waiting_.front(), *preempted_.front()));
}

void Scheduler::admit_waiting(Step& st) {
  std::vector<SchedRequest*> restoring;  // passed over this step, in queue order
  while (num_waiting() > 0) {
    std::deque<SchedRequest*>& queue = preempted_next() ? preempted_ : waiting_;
    if (num_running() >= cfg_.max_num_seqs || chunk_limit(st) <= 0) break;
    // In order: a request that does not fit now blocks the ones behind it.
    const Admit a = admit(st, *queue.front());
    if (a == Admit::kNoRoom) break;
    if (a == Admit::kRestoring) restoring.push_back(queue.front());
    queue.pop_front();
  }
  // Back at the front of their queues, in their order.
  for (auto it = restoring.rbegin(); it != restoring.rend(); ++it) {
    ((*it)->status == RequestStatus::kPreempted ? preempted_ : waiting_).push_front(*it);
  }
}

Scheduler::Admit Scheduler::admit(Step& st, SchedRequest& r) {
  if (!r.registered) {
    // Everything known is "prompt" for the cache: a resumed request retains its window at the end of
    // what it recomputes.
    kv_.add_request(r.id, r.num_tokens(), r.cache_salt);
    r.registered = true;
  }
  const PrefixHit hit = r.compute_prompt ? kv_.empty_prefix(r.id) : kv_.lookup_prefix(r.id, r.tokens);
  // Its prefix is still coming back from the host tier (in the background, beside the running steps):
  // it keeps its place, holding nothing, until the copies land.
  if (!kv_.restored(hit)) return Admit::kRestoring;
  const int64_t n = std::min(r.num_tokens() - hit.tokens, chunk_limit(st));
  if (n <= 0) return Admit::kNoRoom;
  // With others running, a request starts only when its whole prefill and first decode fit, and its first
  // chunk fits whole: squeezed in with less, it would be preempted again as soon as it (or an older request)
  // grows, recomputing its chunks over and over. Alone it takes what fits, so it never starves.
  int64_t fit = 0;
  if (running_.empty()) {
    fit = largest_fit(r, n, &hit);
  } else if (full_blocks_free_for(r, hit) && kv_.can_allocate(r.id, n, &hit)) {
    fit = n;
  }
  if (fit <= 0) return Admit::kNoRoom;
  DSV4_CHECK(kv_.allocate(r.id, fit, r.tokens, &hit), "scheduler: request {} lost room for {} positions", r.id, fit);
  r.num_computed = hit.tokens;
  if (r.num_cached_prompt < 0) r.num_cached_prompt = std::min(hit.tokens, r.prompt_len);
  r.status = RequestStatus::kRunning;
  add_chunk(st, r, fit, false);
  insert_in_order(running_, &r);
  return Admit::kAdmitted;
}

// Whether the full units have the blocks to take the request through its prefill to its first decode
// (sliding units hold windows, which the pool sizing reserves per sequence).
bool Scheduler::full_blocks_free_for(const SchedRequest& r, const PrefixHit& hit) const {
  const KvLayout& layout = kv_.layout();
  const KvCacheStats stats = kv_.stats();
  std::vector<int64_t> need(stats.pools.size(), 0);
  const int64_t blocks = (r.num_tokens() + kKvBlockTokens) / kKvBlockTokens;  // positions num_tokens + 1
  for (size_t u = 0; u < layout.units.size(); ++u) {
    const KvUnit& unit = layout.units[u];
    if (unit.sliding()) continue;
    const auto held = static_cast<int64_t>(hit.blocks[u].size());
    need[static_cast<size_t>(unit.bucket)] += std::max<int64_t>(0, blocks - held) * unit.num_layers();
  }
  for (size_t b = 0; b < need.size(); ++b) {
    if (need[b] > stats.pools[b].free_pages + stats.pools[b].cached_pages) return false;
  }
  return true;
}

// The most positions, up to n, the cache can give the request now (0 = none); allocation is monotone in n.
int64_t Scheduler::largest_fit(const SchedRequest& r, int64_t n, const PrefixHit* hit) const {
  if (kv_.can_allocate(r.id, n, hit)) return n;
  int64_t lo = 0, hi = n;  // lo fits, hi does not
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (kv_.can_allocate(r.id, mid, hit) ? lo : hi) = mid;
  }
  return lo;
}

void Scheduler::add_chunk(Step& st, SchedRequest& r, int64_t n, bool decode) {
  ScheduledChunk c;
  c.id = r.id;
  c.start = r.num_computed;
  const auto first = r.tokens.begin() + static_cast<std::ptrdiff_t>(c.start);
  c.tokens.assign(first, first + static_cast<std::ptrdiff_t>(n));
  c.sample = c.start + n == r.num_tokens();
  c.decode = decode;
  r.num_computed += n;
  st.budget -= n;
  if (decode) {
    st.out.num_decode_tokens += n;
  } else {
    st.out.num_prefill_tokens += n;
    st.prefill_left -= n;
  }
  st.out.chunks.push_back(std::move(c));
}

void Scheduler::preempt(Step& st, SchedRequest& r) {
  kv_.free(r.id);
  r.registered = false;
  r.num_computed = 0;
  r.status = RequestStatus::kPreempted;
  ++r.num_preemptions;
  ++preemptions_;
  running_.erase(std::find(running_.begin(), running_.end(), &r));
  insert_in_order(preempted_, &r);
  st.out.preempted.push_back(r.id);
}

void Scheduler::append_token(RequestId id, int32_t token) {
  const auto it = requests_.find(id);
  DSV4_CHECK(it != requests_.end(), "scheduler: unknown request {}", id);
  DSV4_CHECK(it->second->status == RequestStatus::kRunning, "scheduler: request {} is {}, not running", id,
             request_status_name(it->second->status));
  it->second->tokens.push_back(token);
}

void Scheduler::remove_from_queues(SchedRequest* r) {
  std::erase(running_, r);
  std::erase(preempted_, r);
  std::erase(waiting_, r);
}

bool Scheduler::finish(RequestId id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  SchedRequest* r = it->second.get();
  if (r->registered) kv_.free(id);
  remove_from_queues(r);
  requests_.erase(it);
  return true;
}

RequestId Scheduler::next_waiting() const {
  if (num_waiting() == 0) return 0;
  return (preempted_next() ? preempted_ : waiting_).front()->id;
}

const SchedRequest* Scheduler::find(RequestId id) const {
  const auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

}  // namespace dsv4
