#include "engine/replica_ranks.h"

#include "core/error.h"
#include "kv/kv_memory.h"
#include "model/device_kv_memory.h"

namespace dsv4 {

struct ReplicaRanks::Rank {
  int index = 0;  // within the replica
  Backend backend;
  std::unique_ptr<KvMemoryAllocator> memory;         // the engine's kind of pool memory (zeroed)
  std::vector<std::pair<std::byte*, size_t>> pools;  // one per bucket
  std::unique_ptr<PagedKv> kv;
  std::unique_ptr<Model> model;
  std::unique_ptr<KvMemoryAllocator> host_memory;           // the host tier's pages (mirror_host_tier)
  std::vector<std::pair<std::byte*, size_t>> host_regions;  // one per bucket, like the manager's
  std::thread thread;

  // On the rank's thread (its device's memory), model first, the device last.
  void release() {
    model.reset();
    kv.reset();
    for (const auto& [p, bytes] : pools) memory->deallocate(p, bytes);
    pools.clear();
    memory.reset();
    for (const auto& [p, bytes] : host_regions)
      if (p) host_memory->deallocate(p, bytes);
    host_regions.clear();
    host_memory.reset();
    backend.ops.reset();
    backend.device.reset();
  }
};

struct ReplicaRanks::Recipe {
  const ModelConfig& cfg;
  const ModelWeights& weights;
  const KvCacheManager& manager;
  KvFormats formats;
  const ReplicaPlace& place;
  const Backend& like;
  int threads;
};

ReplicaRanks::ReplicaRanks(const ModelConfig& cfg, const ModelWeights& weights, const KvCacheManager& manager,
                           KvFormats formats, const ParallelLayout& layout, ReplicaPlace place, const Backend& like,
                           int threads)
    : layout_(layout), first_(place.index * layout.config.tp) {
  const int tp = layout.config.tp;
  DSV4_CHECK(place.index >= 0 && place.index < layout.config.dp, "replica {} of {}", place.index,
             layout.config.describe());
  tp_group_ = std::make_shared<RankGroup>(place.placement.kind, tp, place.timeout);
  tp_comms_.resize(static_cast<size_t>(tp));
  world_comms_.resize(place.world ? static_cast<size_t>(tp) : 0);
  tp_comms_[0] = tp_group_->member(*like.device, 0);
  if (place.world) world_comms_[0] = place.world->member(*like.device, first_);

  const Recipe recipe{cfg, weights, manager, formats, place, like, threads};
  for (int t = 1; t < tp; ++t) {
    ranks_.push_back(std::make_unique<Rank>());
    ranks_.back()->index = t;
  }
  for (auto& r : ranks_) r->thread = std::thread([this, rank = r.get(), &recipe] { rank_main(*rank, recipe); });
  std::exception_ptr failed;
  {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return ready_ == static_cast<int>(ranks_.size()); });
    failed = error_;
  }
  if (!failed) return;
  stop_ranks();
  std::rethrow_exception(failed);
}

ReplicaRanks::~ReplicaRanks() {
  if (mirrored_) mirrored_->set_copier(first_copier_);
  stop_ranks();
}

void ReplicaRanks::stop_ranks() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& r : ranks_)
    if (r->thread.joinable()) r->thread.join();
}

void ReplicaRanks::make_rank(Rank& r, const Recipe& m) {
  const auto t = static_cast<size_t>(r.index);
  r.backend = make_backend(m.like.name, m.threads, m.like.numerics, m.place.placement.gpu_of(first_ + r.index));
  Device& dev = *r.backend.device;
  dev.bind_thread();
  r.memory = kv_memory_for(dev);
  std::vector<std::byte*> bases;
  for (const size_t bytes : pool_bytes(m.manager)) {
    r.pools.emplace_back(r.memory->allocate(bytes), bytes);
    bases.push_back(r.pools.back().first);
  }
  r.kv = std::make_unique<PagedKv>(m.cfg, m.manager, m.formats, std::move(bases));
  tp_comms_[t] = tp_group_->member(dev, r.index);
  if (m.place.world) world_comms_[t] = m.place.world->member(dev, first_ + r.index);
  Communicator* c = tp_comms_[t].get();
  Communicator* w = m.place.world ? world_comms_[t].get() : c;
  r.model = std::make_unique<Model>(m.cfg, m.weights, *r.backend.ops, dev, ModelShard{layout_, first_ + r.index, c, w});
}

void ReplicaRanks::rank_main(Rank& r, const Recipe& recipe) {
  std::exception_ptr failed;
  try {
    make_rank(r, recipe);
  } catch (...) {
    failed = std::current_exception();
  }
  {
    std::lock_guard lock(mu_);
    if (failed && !error_) error_ = failed;
    ++ready_;
  }
  cv_.notify_all();
  if (!failed) serve(r);
  const auto t = static_cast<size_t>(r.index);
  tp_comms_[t].reset();  // a host rank leaves its group: peers still waiting fail at once
  if (!world_comms_.empty()) world_comms_[t].reset();
  r.release();
}

ModelShard ReplicaRanks::first_shard() const {
  Communicator* c = tp_comms_.front().get();
  return ModelShard{layout_, first_, c, world_comms_.empty() ? c : world_comms_.front().get()};
}

// A failed rank's peers, in its replica and beyond, stop waiting for it.
void ReplicaRanks::abort(size_t local, const std::string& why) {
  tp_comms_[local]->abort(why);
  if (!world_comms_.empty()) world_comms_[local]->abort(why);
}

void ReplicaRanks::serve(Rank& r) {
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const Job& job = *job_;
    lock.unlock();
    try {
      job(r);
      r.backend.device->synchronize();
    } catch (...) {
      abort(static_cast<size_t>(r.index), "rank " + std::to_string(first_ + r.index) + " failed");
      std::lock_guard g(mu_);
      if (!error_) error_ = std::current_exception();
    }
    lock.lock();
    if (--pending_ == 0) cv_.notify_all();
  }
}

void ReplicaRanks::run(const Job& job, const std::function<void()>& here) {
  {
    std::lock_guard lock(mu_);
    job_ = &job;
    pending_ = static_cast<int>(ranks_.size());
    error_ = nullptr;
    ++generation_;
  }
  cv_.notify_all();
  std::exception_ptr mine;
  try {
    here();
  } catch (...) {
    abort(0, "rank " + std::to_string(first_) + " failed");
    mine = std::current_exception();
  }
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return pending_ == 0; });
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

void ReplicaRanks::step(const ForwardBatch& batch, std::span<const KvRequestId> requests,
                        const std::function<void()>& here) {
  const Job job = [&](Rank& r) {
    for (size_t i = 0; i < requests.size(); ++i) r.kv->bind(static_cast<int32_t>(i), requests[i]);
    r.model->step(batch, *r.kv);
  };
  run(job, here);
}

void ReplicaRanks::idle(const std::function<void()>& here) {
  const Job job = [](Rank& r) { r.model->idle_step(); };
  run(job, here);
}

namespace {

using Regions = std::vector<std::pair<std::byte*, size_t>>;

// The address at p's offset in the region of `to` that matches p's region of `from`.
std::byte* moved(const Regions& from, const Regions& to, const std::byte* p) {
  for (size_t i = 0; i < from.size(); ++i) {
    const auto [base, bytes] = from[i];
    if (base != nullptr && p >= base && p < base + bytes) return to[i].first + (p - base);
  }
  fail("KV host tier: a page copy outside the pools and the host tier's pages");
}

}  // namespace

class ReplicaRanks::MirrorCopier final : public KvPageCopier {
 public:
  MirrorCopier(ReplicaRanks& ranks, KvPageCopier& first, Regions pools, Regions host)
      : ranks_(ranks), first_(first), pools_(std::move(pools)), host_(std::move(host)) {}

  // The other ranks copy on their main queues, in order with their steps (offloads, then restores);
  // the first rank's copier may restore in the background, and its ticket gates every rank's reads (the
  // ranks step together).
  uint64_t copy(std::span<const KvPageCopy> batch) override {
    const Job job = [&](Rank& r) {
      std::vector<Device::Copy> offloads, restores;
      for (const KvPageCopy& c : batch) {
        const Regions &dst_from = c.to_device ? pools_ : host_, &src_from = c.to_device ? host_ : pools_;
        const Regions &dst_to = c.to_device ? r.pools : r.host_regions,
                      &src_to = c.to_device ? r.host_regions : r.pools;
        (c.to_device ? restores : offloads)
            .push_back({moved(dst_from, dst_to, c.dst), moved(src_from, src_to, c.src), static_cast<size_t>(c.bytes)});
      }
      copy_batch(*r.backend.device, offloads);
      copy_batch(*r.backend.device, restores);
    };
    uint64_t ticket = 0;
    ranks_.run(job, [&] { ticket = first_.copy(batch); });
    return ticket;
  }
  bool landed(uint64_t ticket) override { return first_.landed(ticket); }
  double restore_copy_seconds() const override { return first_.restore_copy_seconds(); }  // the gating copies

 private:
  ReplicaRanks& ranks_;
  KvPageCopier& first_;
  Regions pools_, host_;  // the first rank's
};

void ReplicaRanks::mirror_host_tier(KvCacheManager& manager) {
  const Regions host = manager.host_tier_regions();
  if (host.empty() || ranks_.empty()) return;
  DSV4_CHECK(manager.options().copier != nullptr, "KV host tier: no page copier to mirror");
  const Job allocate = [&](Rank& r) {
    Device& dev = *r.backend.device;
    r.host_memory = dev.host_memory() ? std::unique_ptr<KvMemoryAllocator>(std::make_unique<HostKvMemory>())
                                      : std::make_unique<PinnedKvMemory>(dev);
    for (const auto& [p, bytes] : host)
      r.host_regions.emplace_back(p ? r.host_memory->allocate(bytes) : nullptr, bytes);
  };
  run(allocate, [] {});
  Regions pools;
  const std::vector<size_t> bytes = pool_bytes(manager);
  for (size_t b = 0; b < bytes.size(); ++b) pools.emplace_back(manager.pool_memory(static_cast<int>(b)), bytes[b]);
  first_copier_ = manager.options().copier;
  mirror_ = std::make_unique<MirrorCopier>(*this, *first_copier_, std::move(pools), host);
  manager.set_copier(mirror_.get());
  mirrored_ = &manager;
}

}  // namespace dsv4
