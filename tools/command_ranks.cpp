#include "tools/command_ranks.h"

#include <spdlog/spdlog.h>

#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/rank_group.h"

namespace dsv4::tools {

void run_command_ranks(const CommandRanks& c, const std::function<void(RankContext&)>& fn) {
  const int tp = c.parallel.tp, dp = c.parallel.dp, world = c.parallel.world();
  const RankPlacement placement = place_ranks(c.backend, world, -1, c.nodes);
  if (world > 1) spdlog::info("{}: {}", c.parallel.describe(), placement.describe(world));
  // The groups' NCCL ids are node 0's on every host: the replicas' tensor-parallel groups, then all ranks.
  std::vector<RankGroup::NcclId> ids;
  if (placement.kind == CommKind::kNccl && c.nodes.nnodes > 1)
    ids = agree_nccl_ids(c.nodes, dp + 1, c.timeout, make_nccl_id);
  const auto id = [&](int i) { return ids.empty() ? nullptr : &ids[static_cast<size_t>(i)]; };
  std::vector<std::shared_ptr<RankGroup>> replicas;
  for (int d = 0; d < dp; ++d) replicas.push_back(std::make_shared<RankGroup>(placement.kind, tp, c.timeout, id(d)));
  const auto all = std::make_shared<RankGroup>(placement.kind, world, c.timeout, id(dp));
  const int threads = cpu_threads_per_rank(c.threads, placement.local_ranks);
  std::mutex mu;
  std::exception_ptr first;
  std::vector<std::thread> ranks;
  for (int r = placement.first_rank; r < placement.first_rank + placement.local_ranks; ++r) {
    ranks.emplace_back([&, r] {
      const std::string why = "rank " + std::to_string(r) + " failed";
      RankGroup& replica = *replicas[static_cast<size_t>(r / tp)];
      try {
        Backend b = make_backend(c.backend, threads, c.numerics, placement.gpu_of(r));
        b.device->bind_thread();
        // Declared after the backend: they go before the device they live on.
        const std::unique_ptr<Communicator> mine = replica.member(*b.device, r % tp);
        const std::unique_ptr<Communicator> every = all->member(*b.device, r);
        RankContext ctx{r, r - placement.first_rank, b, *mine, *every};
        try {
          fn(ctx);
          b.device->synchronize();
        } catch (...) {
          mine->abort(why);
          every->abort(why);
          throw;
        }
      } catch (...) {
        replica.abort(why);  // also where the rank never made its communicators
        all->abort(why);
        std::lock_guard lock(mu);
        if (!first) first = std::current_exception();
      }
    });
  }
  for (auto& t : ranks) t.join();
  if (first) std::rethrow_exception(first);
}

}  // namespace dsv4::tools
