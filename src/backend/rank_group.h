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
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/comm/communicator.h"
#include "backend/comm/host_group.h"

namespace dsv4 {

enum class CommKind : uint8_t { kHost, kNccl, kStaged };
const char* comm_kind_name(CommKind kind);  // "host", "nccl", "staged"

// The hosts a run spans, as torchrun and vLLM name them (--nnodes, --node-rank, --master-addr,
// --master-port): each host runs this process with world / nnodes of the ranks, node n the ranks
// n x that onward; node 0 listens at the master address for the others (backend/comm/rendezvous.h).
struct NodeConfig {
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
};

// Where the ranks of a run go.
struct RankPlacement {
  CommKind kind = CommKind::kHost;
  int gpus = 0;           // GPUs used on this host (0 on the CPU)
  int ranks_per_gpu = 1;  // ranks sharing one GPU's memory (the busiest GPU's count)
  int first_rank = 0;     // this host's ranks: [first_rank, first_rank + local_ranks)
  int local_ranks = 1;

  int gpu_of(int rank) const { return gpus > 0 ? (rank - first_rank) % gpus : 0; }
  // "4 ranks over nccl, one GPU each" and the like.
  std::string describe(int world) const;
};

// `backend` as make_backend takes it; `gpus` visible on this host (visible_gpus() by default). Several
// hosts need NCCL: the CPU backend, or more ranks on a host than its GPUs, are refused with the reason.
RankPlacement place_ranks(std::string_view backend, int world, int gpus = -1, const NodeConfig& nodes = {});

class RankGroup {
 public:
  using NcclId = std::array<std::byte, 128>;
  // kNccl: `id` is the group's (the same on every host; agree_nccl_ids), or made here when null.
  RankGroup(CommKind kind, int size, std::chrono::milliseconds timeout, const NcclId* id = nullptr);

  CommKind kind() const { return kind_; }
  int size() const { return size_; }
  // Rank `rank`'s communicator on `device` (a CUDA device for kNccl and kStaged).
  std::unique_ptr<Communicator> member(Device& device, int rank);
  // A rank failed before it had its communicator: its peers' collectives fail with `reason` at once
  // (host and staged groups; NCCL peers wait for it up to their timeout).
  void abort(const std::string& reason);

 private:
  CommKind kind_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<HostGroup> host_;  // kHost, kStaged
  NcclId nccl_id_{};                 // kNccl: made once, handed to every member
};

// The NCCL ids of `count` groups, the same on every host: node 0 makes them (`make`) and hands them to
// the others through the rendezvous (one host: made here).
std::vector<RankGroup::NcclId> agree_nccl_ids(const NodeConfig& nodes, int count, std::chrono::milliseconds timeout,
                                              const std::function<RankGroup::NcclId()>& make);
// NCCL's own unique id (the CUDA build only).
RankGroup::NcclId make_nccl_id();

}  // namespace dsv4
