#include "engine/tensor_parallel_ranks.h"

#include <chrono>

#include "core/error.h"
#include "model/device_kv_memory.h"

namespace dsv4 {
namespace {

// Long enough for a slow CPU step of a large prefill; a rank that fails aborts the others at once.
constexpr std::chrono::minutes kCollectiveTimeout{10};

}  // namespace

struct TensorParallelRanks::Rank {
  int index = 0;
  Backend backend;
  std::unique_ptr<KvMemoryAllocator> memory;         // the engine's kind of pool memory (zeroed)
  std::vector<std::pair<std::byte*, size_t>> pools;  // one per bucket

  ~Rank() {
    model.reset();
    kv.reset();
    for (const auto& [p, bytes] : pools) memory->deallocate(p, bytes);
  }

  std::unique_ptr<PagedKv> kv;
  std::unique_ptr<Model> model;
  std::thread thread;
};

TensorParallelRanks::TensorParallelRanks(const ModelConfig& cfg, const ModelWeights& weights,
                                         const KvCacheManager& manager, KvFormats formats, const ParallelLayout& layout,
                                         const Backend& like, int threads)
    : layout_(layout) {
  const int tp = layout.config.tp;
  DSV4_CHECK(layout.config.dp == 1, "tensor-parallel ranks: one replica only (got {})", layout.config.describe());
  DSV4_CHECK(like.device->host_memory(),
             "{}: several ranks run on the cpu backend so far (the {} backend serves one rank)",
             layout.config.describe(), like.name);
  auto group = std::make_shared<HostGroup>(tp, kCollectiveTimeout);
  comms_.push_back(std::make_unique<HostCommunicator>(group, 0, *like.device));
  for (int r = 1; r < tp; ++r) {
    auto rank = std::make_unique<Rank>();
    rank->index = r;
    rank->backend = make_backend(like.name, threads, like.numerics);
    Device& dev = *rank->backend.device;
    rank->memory = kv_memory_for(dev);
    std::vector<std::byte*> bases;
    for (const size_t bytes : pool_bytes(manager)) {
      rank->pools.emplace_back(rank->memory->allocate(bytes), bytes);
      bases.push_back(rank->pools.back().first);
    }
    rank->kv = std::make_unique<PagedKv>(cfg, manager, formats, std::move(bases));
    comms_.push_back(std::make_unique<HostCommunicator>(group, r, dev));
    Communicator* c = comms_.back().get();
    rank->model = std::make_unique<Model>(cfg, weights, *rank->backend.ops, dev, ModelShard{layout, r, c, c});
    ranks_.push_back(std::move(rank));
  }
  for (auto& r : ranks_) r->thread = std::thread([this, rank = r.get()] { serve(*rank); });
}

TensorParallelRanks::~TensorParallelRanks() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& r : ranks_)
    if (r->thread.joinable()) r->thread.join();
}

ModelShard TensorParallelRanks::rank0_shard() const {
  Communicator* c = comms_.front().get();
  return ModelShard{layout_, 0, c, c};
}

void TensorParallelRanks::serve(Rank& r) {
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    const ForwardBatch& batch = *batch_;
    const std::span<const KvRequestId> requests = requests_;
    lock.unlock();
    try {
      for (size_t i = 0; i < requests.size(); ++i) r.kv->bind(static_cast<int32_t>(i), requests[i]);
      r.model->step(batch, *r.kv);
      r.backend.device->synchronize();
    } catch (...) {
      comms_[static_cast<size_t>(r.index)]->abort("rank " + std::to_string(r.index) + " failed");
      std::lock_guard g(mu_);
      if (!error_) error_ = std::current_exception();
    }
    lock.lock();
    if (--pending_ == 0) cv_.notify_all();
  }
}

void TensorParallelRanks::step(const ForwardBatch& batch, std::span<const KvRequestId> requests,
                               const std::function<void()>& here) {
  {
    std::lock_guard lock(mu_);
    batch_ = &batch;
    requests_ = requests;
    pending_ = static_cast<int>(ranks_.size());
    error_ = nullptr;
    ++generation_;
  }
  cv_.notify_all();
  std::exception_ptr mine;
  try {
    here();
  } catch (...) {
    comms_.front()->abort("rank 0 failed");
    mine = std::current_exception();
  }
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return pending_ == 0; });
  if (mine) std::rethrow_exception(mine);
  if (error_) std::rethrow_exception(error_);
}

}  // namespace dsv4
