#include "tools/tensor_parallel_run.h"

#include <chrono>
#include <memory>
#include <vector>

#include "backend/comm/host_communicator.h"
#include "backend/comm/rank_threads.h"
#include "core/error.h"

namespace dsv4::tools {

void run_tensor_parallel(const char* command, const ParallelLayout& layout, const Backend& like, int threads,
                         const std::function<void(Backend&, const ModelShard&)>& fn) {
  const int tp = layout.config.tp;
  DSV4_CHECK(layout.config.dp == 1, "{} {}: one replica (-dp 1)", command, layout.config.describe());
  DSV4_CHECK(like.device->host_memory(), "{} {}: several ranks run on the cpu backend so far", command,
             layout.config.describe());
  std::vector<Backend> backends;
  for (int r = 0; r < tp; ++r)
    backends.push_back(make_backend(like.name, cpu_threads_per_rank(threads, tp), like.numerics));
  auto group = std::make_shared<HostGroup>(tp, std::chrono::minutes(10));
  std::vector<std::unique_ptr<HostCommunicator>> comms;
  std::vector<Communicator*> ranks;
  for (int r = 0; r < tp; ++r) {
    comms.push_back(std::make_unique<HostCommunicator>(group, r, *backends[static_cast<size_t>(r)].device));
    ranks.push_back(comms.back().get());
  }
  run_ranks(ranks, [&](Communicator& c) {
    fn(backends[static_cast<size_t>(c.rank())], ModelShard{layout, c.rank(), &c, &c});
  });
}

}  // namespace dsv4::tools
