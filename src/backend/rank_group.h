// RankGroup: how the ranks of one group inside this process meet (a replica's tensor-parallel ranks,
// or every rank of an expert-parallel run), decided once from the backend and the GPUs it sees
// (RankPlacement): the host communicator on the CPU; NCCL where every rank of the run has a GPU of its
// own; the host-staged communicator where ranks share GPUs (so one H200 runs the sharded CUDA path).
// member() gives a rank its communicator; an NCCL rank joins at its first collective, so members are
// made one after another on any thread.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "backend/comm/communicator.h"
#include "backend/comm/host_group.h"

namespace dsv4 {

enum class CommKind : uint8_t { kHost, kNccl, kStaged };
const char* comm_kind_name(CommKind kind);  // "host", "nccl", "staged"

// Where the `world` ranks of a run in this process go.
struct RankPlacement {
  CommKind kind = CommKind::kHost;
  int gpus = 0;           // GPUs used (0 on the CPU)
  int ranks_per_gpu = 1;  // ranks sharing one GPU's memory (the busiest GPU's count)

  int gpu_of(int rank) const { return gpus > 0 ? rank % gpus : 0; }
  // "4 ranks over nccl, one GPU each" and the like.
  std::string describe(int world) const;
};

// `backend` as make_backend takes it; `gpus` visible (visible_gpus() by default).
RankPlacement place_ranks(std::string_view backend, int world, int gpus = -1);

class RankGroup {
 public:
  RankGroup(CommKind kind, int size, std::chrono::milliseconds timeout);

  CommKind kind() const { return kind_; }
  int size() const { return size_; }
  // Rank `rank`'s communicator on `device` (a CUDA device for kNccl and kStaged).
  std::unique_ptr<Communicator> member(Device& device, int rank);

 private:
  CommKind kind_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<HostGroup> host_;       // kHost, kStaged
  std::array<std::byte, 128> nccl_id_{};  // kNccl: made once, handed to every member
};

}  // namespace dsv4
