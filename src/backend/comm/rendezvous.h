// Rendezvous: how the ranks of a multi-process job find each other over TCP before NCCL starts. Rank 0
// listens on master_port; every other rank connects to master_addr:master_port (retrying until the
// timeout, so start order does not matter), says its rank and the world size, and receives rank 0's blob
// (the 128-byte NCCL unique id). A world size that differs from rank 0's, a rank out of range or one
// that joins twice is refused on both sides with a clear error; ranks that never join make rank 0 fail
// within the timeout naming them, and the waiting ranks with it.
//
// The options are shaped like torchrun's and vLLM's: --master-addr, --master-port, --nnodes,
// --node-rank. With P ranks (GPUs) a node, node n runs ranks n × P ... n × P + P − 1 (global_rank), the
// world size is nnodes × P, and rank 0 (node 0, local rank 0) is the one that listens.
#pragma once

#include <chrono>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace dsv4 {

struct RendezvousOptions {
  std::string master_addr = "127.0.0.1";  // rank 0's host, as the other ranks reach it
  int master_port = 29500;
  int world_size = 1;
  int rank = 0;
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// torchrun's numbering: local rank `local_rank` of node `node_rank`, with `ranks_per_node` ranks a node.
int global_rank(int node_rank, int ranks_per_node, int local_rank);

// Returns rank 0's `blob` on every rank (the others pass an empty one). Throws dsv4::Error on refusal or
// when the ranks have not all met within the timeout.
std::vector<std::byte> rendezvous(const RendezvousOptions& options, std::span<const std::byte> blob);

}  // namespace dsv4
