#include "backend/rank_group.h"

#include <fmt/format.h>

#include <algorithm>

#include "backend/backend.h"
#include "backend/comm/host_communicator.h"
#include "backend/comm/rendezvous.h"
#include "backend/comm/staged_communicator.h"
#include "core/error.h"
#ifdef DSV4_HAVE_CUDA
#include "backend/cuda/nccl_communicator.h"
#endif

namespace dsv4 {

const char* comm_kind_name(CommKind kind) {
  constexpr const char* kNames[] = {"host", "nccl", "staged"};  // CommKind's order
  return kNames[static_cast<size_t>(kind)];
}

std::string RankPlacement::describe(int world) const {
  if (kind == CommKind::kHost) return fmt::format("{} ranks as threads over the host communicator", world);
  if (kind == CommKind::kStaged)
    return fmt::format("{} ranks on {} GPU(s), up to {} a GPU, collectives staged through host memory", world, gpus,
                       ranks_per_gpu);
  if (local_ranks == world) return fmt::format("{} ranks over NCCL, one GPU each", world);
  return fmt::format("{} ranks over NCCL, one GPU each; this host runs ranks {}-{}", world, first_rank,
                     first_rank + local_ranks - 1);
}

RankPlacement place_ranks(std::string_view backend, int world, int gpus, const NodeConfig& nodes) {
  DSV4_CHECK(world >= 1, "place_ranks: {} ranks", world);
  DSV4_CHECK(nodes.nnodes >= 1 && nodes.node_rank >= 0 && nodes.node_rank < nodes.nnodes,
             "--node-rank {} of --nnodes {}", nodes.node_rank, nodes.nnodes);
  DSV4_CHECK(world % nodes.nnodes == 0, "{} ranks do not divide over --nnodes {} hosts", world, nodes.nnodes);
  const int local = world / nodes.nnodes, first = nodes.node_rank * local;
  const bool cuda = resolve_backend_name(backend) == "cuda";
  if (nodes.nnodes > 1) {
    DSV4_CHECK(cuda, "--nnodes {}: ranks on several hosts meet over NCCL: use --backend cuda", nodes.nnodes);
    if (gpus < 0) gpus = visible_gpus();
    DSV4_CHECK(local <= gpus,
               "--nnodes {}: this host runs {} ranks but sees {} GPU(s); across hosts each rank "
               "needs a GPU of its own",
               nodes.nnodes, local, gpus);
    return {CommKind::kNccl, local, 1, first, local};
  }
  if (!cuda) return {CommKind::kHost, 0, 1, 0, world};
  if (gpus < 0) gpus = visible_gpus();
  DSV4_CHECK(gpus > 0, "backend cuda: no CUDA GPU is visible on this machine (use --backend cpu)");
  if (world <= gpus) return {CommKind::kNccl, world, 1, 0, world};
  return {CommKind::kStaged, gpus, (world + gpus - 1) / gpus, 0, world};
}

RankGroup::NcclId make_nccl_id() {
#ifdef DSV4_HAVE_CUDA
  return cuda::NcclCommunicator::make_unique_id();
#else
  fail("NCCL needs the CUDA backend, which this build lacks");
#endif
}

std::vector<RankGroup::NcclId> agree_nccl_ids(const NodeConfig& nodes, int count, std::chrono::milliseconds timeout,
                                              const std::function<RankGroup::NcclId()>& make) {
  std::vector<std::byte> blob;
  if (nodes.node_rank == 0)
    for (int i = 0; i < count; ++i) {
      const RankGroup::NcclId id = make();
      blob.insert(blob.end(), id.begin(), id.end());
    }
  if (nodes.nnodes > 1)
    blob = rendezvous({nodes.master_addr, nodes.master_port, nodes.nnodes, nodes.node_rank, timeout}, blob);
  const size_t n = sizeof(RankGroup::NcclId);
  DSV4_CHECK(blob.size() == static_cast<size_t>(count) * n, "the hosts' rendezvous gave {} bytes for {} NCCL ids",
             blob.size(), count);
  std::vector<RankGroup::NcclId> ids(static_cast<size_t>(count));
  for (size_t i = 0; i < ids.size(); ++i)
    std::copy(blob.begin() + static_cast<std::ptrdiff_t>(i * n),
              blob.begin() + static_cast<std::ptrdiff_t>((i + 1) * n), ids[i].begin());
  return ids;
}

RankGroup::RankGroup(CommKind kind, int size, std::chrono::milliseconds timeout, const NcclId* id)
    : kind_(kind == CommKind::kNccl && size == 1 ? CommKind::kStaged : kind), size_(size), timeout_(timeout) {
  DSV4_CHECK(size >= 1, "rank group of {} ranks", size);  // a group of one needs no NCCL (nor its library)
  if (kind_ != CommKind::kNccl) {
    host_ = std::make_shared<HostGroup>(size, timeout);
    return;
  }
  nccl_id_ = id != nullptr ? *id : make_nccl_id();
}

void RankGroup::abort(const std::string& reason) {
  if (host_) host_->abort(reason);
}

std::unique_ptr<Communicator> RankGroup::member(Device& device, int rank) {
  DSV4_CHECK(rank >= 0 && rank < size_, "rank {} of a group of {}", rank, size_);
  switch (kind_) {
    case CommKind::kHost:
      return std::make_unique<HostCommunicator>(host_, rank, device);
    case CommKind::kStaged:
      return std::make_unique<StagedCommunicator>(device, host_, rank);
    case CommKind::kNccl:
      break;
  }
#ifdef DSV4_HAVE_CUDA
  auto* gpu = dynamic_cast<cuda::CudaDevice*>(&device);
  DSV4_CHECK(gpu != nullptr, "rank {}: NCCL needs a CUDA device", rank);
  return std::make_unique<cuda::NcclCommunicator>(*gpu, nccl_id_, rank, size_, timeout_,
                                                  cuda::NcclCommunicator::Join::kAtFirstCollective);
#else
  fail("rank {}: NCCL needs the CUDA backend, which this build lacks", rank);
#endif
}

}  // namespace dsv4
