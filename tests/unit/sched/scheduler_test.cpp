// Scheduler over a bookkeeping-only KvCacheManager (no KV bytes, no model): budgets, chunking, prefix
// hits, preemption by recompute and resumption order, abort accounting.
#include "sched/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "core/error.h"
#include "kv/kv_layout.h"
#include "kv/kv_memory.h"
#include "kv/kv_pool_sizing.h"
#include "unit/kv/kv_page_copy_held.h"

namespace dsv4 {
namespace {

// The tiny preset's layer schedule ([0, 4, 128, 4]), with head dims that keep pages small.
ModelConfig sched_config() {
  return {.n_layers = 4,
          .head_dim = 128,
          .rope_head_dim = 64,
          .window_size = 128,
          .compress_ratios = {0, 4, 128, 4, 0},
          .index_head_dim = 128};
}

std::vector<int32_t> ids(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % 1000);
  return t;
}

// Pools sized by size_kv_pools for `seqs` sequences, with `full_blocks` 256-position blocks in the full units.
std::unique_ptr<KvCacheManager> make_kv(int64_t seqs, int64_t batched, int64_t full_blocks, bool prefix = true) {
  KvLayout layout = make_kv_layout(sched_config(), {});
  KvPoolSizing sizing{seqs, batched, 1.0};
  int64_t lo = 1, hi = int64_t{1} << 36;  // smallest budget with that many full blocks
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    bool ok = false;
    try {
      ok = size_kv_pools(layout, mid, sizing).full_tokens >= full_blocks * kKvBlockTokens;
    } catch (const Error&) {
    }
    (ok ? hi : lo) = mid;
  }
  KvCacheOptions o;
  o.enable_prefix_caching = prefix;
  return std::make_unique<KvCacheManager>(layout, size_kv_pools(layout, hi, sizing).pages, o);
}

int64_t used_pages(const KvCacheManager& kv) {
  int64_t used = 0;
  for (const auto& p : kv.stats().pools) used += p.used_pages;
  return used;
}

// Every request has left: nothing waits or runs, and every page is back in the pools.
void expect_drained(const Scheduler& s, const KvCacheManager& kv) {
  EXPECT_FALSE(s.has_work());
  EXPECT_EQ(used_pages(kv), 0);
  kv.check_consistency();
}

// The runner's stand-in for sampling: a token that depends only on the request and its length, so that a
// recompute after preemption must feed back the very tokens it generated.
int32_t token_of(const ScheduledChunk& c) {
  return static_cast<int32_t>((c.id * 7919 + static_cast<uint64_t>(c.start + c.tokens.size())) % 1000);
}

// Plays the runner: every sampled token is `token_of(chunk)`, and requests stop after `out` tokens.
struct Driver {
  explicit Driver(Scheduler& sched) : s(sched) {}
  Scheduler& s;
  std::map<RequestId, int64_t> remaining;  // tokens still to generate
  std::map<RequestId, std::vector<int32_t>> outputs;

  Schedule step() {
    Schedule sch = s.schedule();
    for (const ScheduledChunk& c : sch.chunks) {
      if (!c.sample) continue;
      const int32_t tok = token_of(c);
      s.append_token(c.id, tok);
      outputs[c.id].push_back(tok);
      if (--remaining[c.id] == 0) {
        s.finish(c.id);
        remaining.erase(c.id);
      }
    }
    return sch;
  }
  void add(RequestId id, std::vector<int32_t> prompt, int64_t out, int64_t priority = 0) {
    s.add(id, std::move(prompt), {}, priority);
    remaining[id] = out;
  }
  // Requests 1..n each generated all `out` of their tokens (none was lost to a preemption).
  void expect_outputs(RequestId n, size_t out) {
    for (RequestId id = 1; id <= n; ++id) EXPECT_EQ(outputs[id].size(), out) << "request " << id;
  }
};

TEST(Scheduler, ChunksLongPromptsUnderTheTokenBudget) {
  auto kv = make_kv(8, 256, 64);
  Scheduler s({.max_num_batched_tokens = 256, .policy = ChunkPolicy::kBudget}, *kv);
  const auto prompt = ids(1000, 1);
  s.add(1, prompt);
  int64_t pos = 0;
  for (int step = 0; pos < 1000; ++step) {
    const Schedule sch = s.schedule();
    ASSERT_EQ(sch.chunks.size(), 1u);
    const ScheduledChunk& c = sch.chunks[0];
    EXPECT_EQ(c.start, pos);
    EXPECT_EQ(static_cast<int64_t>(c.tokens.size()), std::min<int64_t>(256, 1000 - pos));
    EXPECT_TRUE(std::equal(c.tokens.begin(), c.tokens.end(), prompt.begin() + pos));
    pos += static_cast<int64_t>(c.tokens.size());
    EXPECT_EQ(c.sample, pos == 1000);   // logits only for the last chunk
    EXPECT_EQ(kv->num_tokens(1), pos);  // positions allocated before the forward
  }
  s.append_token(1, 5);
  const Schedule d = s.schedule();
  ASSERT_EQ(d.chunks.size(), 1u);
  EXPECT_TRUE(d.chunks[0].decode);
  EXPECT_EQ(d.chunks[0].start, 1000);
  EXPECT_EQ(d.chunks[0].tokens, std::vector<int32_t>{5});
}

TEST(Scheduler, DecodesFirstThenPrefillsWithinBudgetAndSequenceCap) {
  auto kv = make_kv(4, 64, 64);
  Scheduler s({.max_num_seqs = 3, .max_num_batched_tokens = 64, .policy = ChunkPolicy::kBudget}, *kv);
  Driver d(s);
  for (RequestId id = 1; id <= 5; ++id) d.add(id, ids(50, static_cast<uint32_t>(id)), 20);
  for (int i = 0; i < 200 && s.has_work(); ++i) {
    const int64_t decoding =
        std::count_if(s.running().begin(), s.running().end(), [](const SchedRequest* r) { return r->decoding(); });
    const Schedule sch = d.step();
    EXPECT_LE(sch.num_tokens(), 64);
    EXPECT_LE(s.num_running(), 3);
    EXPECT_EQ(sch.num_decode_tokens, std::min<int64_t>(decoding, 64));  // every decode got its token
  }
  expect_drained(s, *kv);
}

TEST(Scheduler, MoreDecodesThanTheBudgetNeverOverflowIt) {
  auto kv = make_kv(8, 64, 64);
  Scheduler s({.max_num_batched_tokens = 4, .policy = ChunkPolicy::kBudget}, *kv);
  Driver d(s);
  for (RequestId id = 1; id <= 7; ++id) d.add(id, ids(3, static_cast<uint32_t>(id)), 6);
  int64_t steps = 0;
  for (; steps < 500 && s.has_work(); ++steps) EXPECT_LE(d.step().num_tokens(), 4);
  EXPECT_FALSE(s.has_work());
  d.expect_outputs(7, 6);
}

TEST(Scheduler, PrefixHitSkipsComputedTokens) {
  auto kv = make_kv(4, 2048, 64);
  Scheduler s({}, *kv);
  Driver d(s);
  const auto shared = ids(600, 3);
  d.add(1, shared, 2);
  while (s.has_work()) d.step();
  auto other = shared;
  other.resize(540);  // same first 2 blocks, then different
  for (int i = 0; i < 40; ++i) other.push_back(999);
  d.add(2, other, 1);
  const Schedule sch = d.step();
  ASSERT_EQ(sch.chunks.size(), 1u);
  EXPECT_EQ(sch.chunks[0].start, 512);
  EXPECT_EQ(sch.chunks[0].tokens.size(), 68u);
  EXPECT_EQ(s.find(2), nullptr);  // finished after its one token
  const KvCacheStats st = kv->stats();
  EXPECT_EQ(st.hit_tokens, 512);
}

TEST(Scheduler, PreemptsNewestWhenBlocksRunOutAndResumesItFirst) {
  // Four full blocks: three requests of 300-token prompts growing to 560 positions cannot all fit.
  auto kv = make_kv(4, 512, 4, /*prefix=*/false);
  Scheduler s({.max_num_batched_tokens = 512, .policy = ChunkPolicy::kBudget}, *kv);
  Driver d(s);
  for (RequestId id = 1; id <= 3; ++id) d.add(id, ids(300, static_cast<uint32_t>(id)), 260);
  bool saw_preemption = false;
  for (int i = 0; i < 5000 && s.has_work(); ++i) {
    const Schedule sch = d.step();
    for (RequestId p : sch.preempted) {
      saw_preemption = true;
      const SchedRequest* r = s.find(p);
      ASSERT_NE(r, nullptr);
      EXPECT_EQ(r->status, RequestStatus::kPreempted);
      EXPECT_EQ(r->num_computed, 0);
      EXPECT_FALSE(kv->has_request(p));
      EXPECT_EQ(s.next_waiting(), sch.preempted.front());  // preempted requests go first
      for (const ScheduledChunk& c : sch.chunks) EXPECT_NE(c.id, p);
    }
    // The oldest running request always progresses.
    if (!s.running().empty() && sch.preempted.empty()) {
      EXPECT_FALSE(sch.chunks.empty());
    }
  }
  EXPECT_TRUE(saw_preemption);
  EXPECT_GT(s.num_preemptions(), 0u);
  d.expect_outputs(3, 260);
  expect_drained(s, *kv);
}

// The priority policy (vLLM's): requests start in (priority, arrival) order whatever order they came in,
// on fresh random priorities with ties; under FCFS the same requests start in arrival order.
TEST(Scheduler, PriorityPolicyStartsLowerValuesFirst) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  for (const SchedulingPolicy policy : {SchedulingPolicy::kPriority, SchedulingPolicy::kFcfs}) {
    auto kv = make_kv(2, 256, 64);
    SchedulerConfig cfg;
    cfg.max_num_seqs = 1;  // one at a time: the start order is the scheduling order
    cfg.scheduling = policy;
    Scheduler s(cfg, *kv);
    Driver d(s);
    std::vector<std::pair<int64_t, RequestId>> want;
    for (RequestId id = 1; id <= 12; ++id) {
      const int64_t priority = policy == SchedulingPolicy::kPriority ? static_cast<int64_t>(rng() % 5) - 2 : 0;
      d.add(id, ids(40, static_cast<uint32_t>(id)), 3, priority);
      want.emplace_back(priority, id);
    }
    std::stable_sort(want.begin(), want.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<RequestId> started;
    for (int i = 0; i < 500 && s.has_work(); ++i) {
      for (const ScheduledChunk& c : d.step().chunks)
        if (c.start == 0) started.push_back(c.id);
    }
    std::vector<RequestId> order;
    for (const auto& w : want) order.push_back(w.second);
    EXPECT_EQ(started, order) << scheduling_policy_name(policy);
  }
}

// When blocks run out, the priority policy preempts the running request that runs last in its order (the
// highest value, here an old request), never a more urgent newer one, and resumes it after the urgent
// ones; every request still finishes with all its tokens.
TEST(Scheduler, PriorityPolicyPreemptsTheLeastUrgent) {
  auto kv = make_kv(4, 512, 4, /*prefix=*/false);
  Scheduler s(
      {.max_num_batched_tokens = 512, .policy = ChunkPolicy::kBudget, .scheduling = SchedulingPolicy::kPriority}, *kv);
  Driver d(s);
  const std::map<RequestId, int64_t> priority = {{1, 9}, {2, 0}, {3, -4}};  // the oldest is the least urgent
  d.add(1, ids(300, 1), 260, priority.at(1));
  d.step();
  d.step();  // 1 runs (FCFS would preempt a newer request before it)
  d.add(2, ids(300, 2), 260, priority.at(2));
  d.add(3, ids(300, 3), 260, priority.at(3));
  std::vector<RequestId> victims;
  for (int i = 0; i < 5000 && s.has_work(); ++i) {
    std::vector<int64_t> running;
    for (const SchedRequest* r : s.running()) running.push_back(r->priority);
    const Schedule sch = d.step();
    for (RequestId p : sch.preempted) {
      victims.push_back(p);
      EXPECT_EQ(priority.at(p), *std::max_element(running.begin(), running.end()));
    }
  }
  ASSERT_FALSE(victims.empty());
  EXPECT_EQ(victims.front(), 1u);
  d.expect_outputs(3, 260);
  expect_drained(s, *kv);
}

TEST(Scheduler, RecomputeFeedsGeneratedTokensBackAndSamplesOnce) {
  auto kv = make_kv(4, 512, 4, /*prefix=*/false);
  Scheduler s({.max_num_batched_tokens = 512, .policy = ChunkPolicy::kBudget}, *kv);
  Driver d(s);
  d.add(1, ids(300, 1), 300);
  d.add(2, ids(300, 2), 300);
  std::vector<int32_t> before;
  for (int i = 0; i < 5000 && s.has_work(); ++i) {
    const Schedule sch = s.schedule();
    for (RequestId p : sch.preempted) {
      if (p == 2) before = s.find(2)->tokens;
    }
    for (const ScheduledChunk& c : sch.chunks) {
      if (c.id == 2 && c.start == 0 && !before.empty()) {
        // The recompute covers the prompt and every generated token, and samples only at its end.
        EXPECT_EQ(static_cast<int64_t>(c.tokens.size()) == static_cast<int64_t>(before.size()), c.sample);
        EXPECT_TRUE(std::equal(c.tokens.begin(), c.tokens.end(), before.begin()));
      }
    }
    // Driver's token rule, on the schedule this test has already looked at.
    for (const ScheduledChunk& c : sch.chunks) {
      if (!c.sample) continue;
      s.append_token(c.id, token_of(c));
      if (--d.remaining[c.id] == 0) s.finish(c.id);
    }
  }
  EXPECT_FALSE(before.empty());
  EXPECT_FALSE(s.has_work());
}

// A cost model: 4 ms per step plus 1 ms per prefill token.
double step_cost(const Schedule& sch) { return 0.004 + 0.001 * static_cast<double>(sch.num_prefill_tokens); }

// Request 1 (a 10-token prompt) prefills alone, then decodes for five decode-only steps; then a
// 1000-token prompt (request 2) arrives and runs to its end beside it. Returns the most any of those
// steps cost and how many of them carried a chunk of the prompt.
struct PromptRun {
  double worst = 0;
  int64_t chunks = 0;
};
PromptRun prompt_beside_a_decode(Scheduler& s, Driver& d) {
  d.add(1, ids(10, 1), 100000);
  const Schedule first = d.step();  // prefill alone: the whole prompt
  EXPECT_EQ(first.num_prefill_tokens, 10);
  s.observe_step(first, step_cost(first));
  for (int i = 0; i < 5; ++i) s.observe_step(d.step(), step_cost(Schedule{}));  // decode-only steps
  d.add(2, ids(1000, 2), 1);
  PromptRun r;
  while (s.find(2) != nullptr) {
    const Schedule sch = d.step();
    EXPECT_EQ(sch.num_decode_tokens, 1);
    s.observe_step(sch, step_cost(sch));
    r.worst = std::max(r.worst, step_cost(sch));
    r.chunks += sch.num_prefill_tokens > 0;
  }
  return r;
}

TEST(Scheduler, LatencyPolicyBoundsPrefillWhileDecodesRun) {
  auto kv = make_kv(8, 2048, 64);
  Scheduler s({.max_num_batched_tokens = 2048, .itl_slack = 0.5, .itl_target_ms = 0}, *kv);
  Driver d(s);
  const PromptRun r = prompt_beside_a_decode(s, d);
  EXPECT_GE(r.chunks, 16);                 // the prompt took many chunks...
  EXPECT_LE(r.worst, 0.004 * 1.5 + 1e-9);  // ...and no step exceeded (1 + slack) decode steps
  // With no decode running, a prompt gets the whole budget.
  s.finish(1);
  d.add(3, ids(1500, 3), 1);
  EXPECT_EQ(d.step().num_prefill_tokens, 1500);
}

// With an ITL target above (1 + slack) decode steps, the prompt takes fewer, larger chunks, and no step
// exceeds the target.
TEST(Scheduler, LatencyPolicyGrowsChunksToTheItlTarget) {
  auto kv = make_kv(8, 2048, 64);
  Scheduler s({.max_num_batched_tokens = 2048, .itl_slack = 0.5, .itl_target_ms = 40}, *kv);
  Driver d(s);
  const PromptRun r = prompt_beside_a_decode(s, d);
  EXPECT_LE(r.worst, 0.040 + 1e-9);
  EXPECT_LE(r.chunks, 50);  // ~36 tokens a chunk once grown (the slack alone: 2)
  EXPECT_GE(r.chunks, 28);
}

TEST(Scheduler, FinishAtAnyPointReturnsEveryBlock) {
  auto kv = make_kv(6, 300, 12);
  const KvCacheStats initial = kv->stats();
  Scheduler s({.max_num_seqs = 6, .max_num_batched_tokens = 300}, *kv);
  Driver d(s);
  std::mt19937 rng(5);
  RequestId next = 1;
  for (int i = 0; i < 3000; ++i) {
    if (rng() % 3 == 0) d.add(next++, ids(1 + rng() % 700, static_cast<uint32_t>(rng() % 4)), 1 + rng() % 40);
    if (rng() % 4 == 0 && !d.remaining.empty()) {  // abort a random live request, whatever its state
      auto it = d.remaining.begin();
      std::advance(it, static_cast<long>(rng() % d.remaining.size()));
      EXPECT_TRUE(s.finish(it->first));
      d.remaining.erase(it);
    }
    d.step();
    if (i % 100 == 0) kv->check_consistency();
  }
  for (const auto& [id, left] : d.remaining) s.finish(id);
  EXPECT_FALSE(s.has_work());
  const KvCacheStats end = kv->stats();
  for (size_t p = 0; p < end.pools.size(); ++p) {
    EXPECT_EQ(end.pools[p].used_pages, 0);
    EXPECT_EQ(end.pools[p].free_pages + end.pools[p].cached_pages, initial.pools[p].free_pages);
  }
  EXPECT_EQ(end.running_requests, 0);
  kv->check_consistency();
}

TEST(Scheduler, RefusesBadInput) {
  auto kv = make_kv(2, 64, 4);
  SchedulerConfig cfg;
  cfg.max_num_seqs = 0;
  EXPECT_THROW(Scheduler(cfg, *kv), Error);
  cfg.max_num_seqs = 2;
  cfg.max_num_batched_tokens = 0;
  EXPECT_THROW(Scheduler(cfg, *kv), Error);
  cfg.max_num_batched_tokens = 64;
  Scheduler s(cfg, *kv);
  EXPECT_THROW(s.add(1, {}), Error);
  EXPECT_THROW(s.add(2, {1, 2}, {}, 3), Error);  // a priority needs the priority policy
  s.add(1, {1, 2});
  EXPECT_THROW(s.add(1, {1}), Error);
  EXPECT_FALSE(s.finish(9));
  EXPECT_THROW(s.append_token(1, 3), Error);  // not running yet
}

// A prefix coming back from the host tier in the background holds its request at the head of the queue,
// while the running decodes go on step after step; once the copies land the request starts at its hit.
// Pools of 16 full blocks and two sequences' windows in host memory, with a host tier of twice their bytes
// whose restores the copier holds back until told.
struct TieredKv {
  TieredKv() {
    KvCacheOptions o{.memory = &pools, .host_memory = &host, .copier = &copier};
    std::vector<int64_t> pages;
    int64_t bytes = 0;
    for (const KvPoolStats& p : make_kv(2, 4096, 16)->stats().pools) {
      pages.push_back(p.capacity_pages);
      bytes += p.capacity_pages * p.page_bytes;
    }
    o.host_tier_bytes = 2 * bytes;
    kv = std::make_unique<KvCacheManager>(make_kv_layout(sched_config(), {}), pages, o);
  }
  ~TieredKv() { copier.land(); }  // before kv, which waits for copies in flight
  // Runs a 2000-token prompt, then a 3500-token one whose blocks push the first out to the host tier;
  // returns the first.
  std::vector<int32_t> evict_one(Driver& d) {
    const auto a = ids(2000, 21);
    d.add(1, a, 1);
    while (d.remaining.count(1)) d.step();
    d.add(2, ids(3500, 22), 1);
    while (d.remaining.count(2)) d.step();
    return a;
  }
  // evict_one, then request 4: the evicted prompt and one token more, whose prefix must come back.
  void add_restoring(Driver& d) {
    auto a = evict_one(d);
    a.push_back(7);
    d.add(4, a, 1);
  }
  HostKvMemory pools, host;
  kvtest::HeldRestores copier;
  std::unique_ptr<KvCacheManager> kv;
};

TEST(Scheduler, RequestWaitsForItsBackgroundRestoreWhileDecodesRun) {
  TieredKv t;
  KvCacheManager& kv = *t.kv;
  kvtest::HeldRestores& copier = t.copier;
  Scheduler s({.max_num_batched_tokens = 4096, .policy = ChunkPolicy::kBudget}, kv);
  Driver d(s);
  const auto a = t.evict_one(d);
  d.add(3, ids(100, 23), 40);
  d.step();  // request 3's prefill
  auto with_a = a;
  with_a.push_back(7);
  d.add(4, with_a, 1);
  for (int i = 0; i < 3; ++i) {
    const Schedule sch = d.step();
    ASSERT_EQ(sch.chunks.size(), 1u) << "step " << i;
    EXPECT_EQ(sch.chunks[0].id, 3u);  // the decode runs; request 4 waits for its copies
    EXPECT_TRUE(sch.chunks[0].decode);
  }
  EXPECT_GT(copier.held(), 0u);
  EXPECT_EQ(kv.restores_in_flight(), 1);
  copier.land();
  const Schedule sch = d.step();
  const auto it = std::find_if(sch.chunks.begin(), sch.chunks.end(), [](const auto& c) { return c.id == 4u; });
  ASSERT_NE(it, sch.chunks.end());
  EXPECT_EQ(it->start, 1792);  // the whole blocks of a (a's last, partial block is never a hit)
  EXPECT_EQ(kv.stats().host_hits, 1);
  kv.check_consistency();
}

// Alone and waiting for its restore, a request leaves the step empty, yet it is not stuck: the engine
// must not fail it as one the cache can never hold.
TEST(Scheduler, RequestWaitingForARestoreIsNotStuck) {
  TieredKv t;
  Scheduler s({.max_num_batched_tokens = 4096, .policy = ChunkPolicy::kBudget}, *t.kv);
  Driver d(s);
  t.add_restoring(d);
  const Schedule waiting = d.step();
  EXPECT_TRUE(waiting.empty());
  EXPECT_FALSE(s.stuck(waiting));
  t.copier.land();
  const Schedule sch = d.step();
  ASSERT_EQ(sch.chunks.size(), 1u);
  EXPECT_EQ(sch.chunks[0].start, 1792);
}

// A request waiting for its restore keeps its place but does not hold up the ones behind it.
TEST(Scheduler, RequestsBehindARestoringOneStartMeanwhile) {
  TieredKv t;
  Scheduler s({.max_num_batched_tokens = 4096, .policy = ChunkPolicy::kBudget}, *t.kv);
  Driver d(s);
  t.add_restoring(d);
  d.add(5, ids(100, 24), 5);
  const Schedule first = d.step();
  ASSERT_EQ(first.chunks.size(), 1u);
  EXPECT_EQ(first.chunks[0].id, 5u);
  EXPECT_EQ(s.next_waiting(), 4u);  // still first in line
  t.copier.land();
  const Schedule sch = d.step();
  const auto it = std::find_if(sch.chunks.begin(), sch.chunks.end(), [](const auto& c) { return c.id == 4u; });
  ASSERT_NE(it, sch.chunks.end());
  EXPECT_EQ(it->start, 1792);
}

// Aborted while its prefix comes back, a request leaves the restore's pages held only until the copies
// land: the next step lets them go (no lookup needed).
TEST(Scheduler, AnAbortedRestoreFreesItsPagesAtTheNextStep) {
  TieredKv t;
  Scheduler s({.max_num_batched_tokens = 4096, .policy = ChunkPolicy::kBudget}, *t.kv);
  Driver d(s);
  t.add_restoring(d);
  EXPECT_TRUE(d.step().empty());
  s.finish(4);
  EXPECT_EQ(t.kv->restores_in_flight(), 1);
  t.copier.land();
  EXPECT_TRUE(s.schedule().empty());
  EXPECT_EQ(t.kv->restores_in_flight(), 0);
  expect_drained(s, *t.kv);
}

}  // namespace
}  // namespace dsv4
