#include "backend/rank_group.h"

#include <fmt/format.h>

#include "backend/backend.h"
#include "backend/comm/host_communicator.h"
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
  if (kind == CommKind::kNccl) return fmt::format("{} ranks over NCCL, one GPU each", world);
  return fmt::format("{} ranks on {} GPU(s), up to {} a GPU, collectives staged through host memory", world, gpus,
                     ranks_per_gpu);
}

RankPlacement place_ranks(std::string_view backend, int world, int gpus) {
  DSV4_CHECK(world >= 1, "place_ranks: {} ranks", world);
  if (resolve_backend_name(backend) != "cuda") return {};
  if (gpus < 0) gpus = visible_gpus();
  DSV4_CHECK(gpus > 0, "backend cuda: no CUDA GPU is visible on this machine (use --backend cpu)");
  if (world <= gpus) return {CommKind::kNccl, world, 1};
  return {CommKind::kStaged, gpus, (world + gpus - 1) / gpus};
}

RankGroup::RankGroup(CommKind kind, int size, std::chrono::milliseconds timeout)
    : kind_(kind == CommKind::kNccl && size == 1 ? CommKind::kStaged : kind), size_(size), timeout_(timeout) {
  DSV4_CHECK(size >= 1, "rank group of {} ranks", size);  // a group of one needs no NCCL (nor its library)
  if (kind_ != CommKind::kNccl) {
    host_ = std::make_shared<HostGroup>(size, timeout);
    return;
  }
#ifdef DSV4_HAVE_CUDA
  nccl_id_ = cuda::NcclCommunicator::make_unique_id();
#else
  fail("rank group: NCCL needs the CUDA backend, which this build lacks");
#endif
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
