#include "tools/bench_comm.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "backend/device.h"
#include "backend/rank_group.h"
#include "core/error.h"
#include "tools/command.h"
#include "tools/command_ranks.h"
#include "tools/engine_flags.h"
#include "tools/parallel_flags.h"

namespace dsv4::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct CommArgs {
  std::string backend = "auto", numerics, mib = "1,16,128";
  int threads = 0;
  int ranks = 2;
  int reps = 20;
  bool json = false;
  NodeConfig nodes;
};

enum class Op { kAllGather, kAllReduce, kAllToAll };
constexpr Op kOps[] = {Op::kAllGather, Op::kAllReduce, Op::kAllToAll};
const char* op_name(Op op) {
  return op == Op::kAllGather ? "all_gather" : op == Op::kAllReduce ? "all_reduce" : "all_to_all";
}

// nccl-tests' conventions. The size is all_gather's gathered output, all_reduce's buffer, what a rank
// sends in all_to_all; the bus bandwidth scales the algorithm bandwidth (size / time) by what each link
// must carry, so every collective compares with one link's bandwidth.
double bus_factor(Op op, int n) {
  const double f = static_cast<double>(n - 1) / n;
  return op == Op::kAllReduce ? 2 * f : f;
}

// One collective of `bytes` (a multiple of 2 x ranks) from send into recv.
void run_op(Communicator& c, Op op, const std::byte* send, std::byte* recv, size_t bytes) {
  const auto n = static_cast<size_t>(c.size());
  switch (op) {
    case Op::kAllGather:
      return c.all_gather(send + c.rank() * (bytes / n), recv, bytes / n);
    case Op::kAllReduce:
      return c.all_reduce(send, recv, bytes / 2, DType::kBF16);
    case Op::kAllToAll: {
      const std::vector<size_t> counts(n, bytes / n);
      return c.all_to_all(send, counts, recv, counts);
    }
  }
}

struct Row {
  Op op;
  int64_t bytes = 0;
  double ms = 0;  // the slowest rank's mean time per call
};

// A rank's times: [size][op] in ms.
std::vector<double> time_rank(const CommArgs& a, const std::vector<int64_t>& sizes, RankContext& r) {
  Device& dev = *r.backend.device;
  std::vector<double> ms;
  std::mt19937 rng(static_cast<uint32_t>(r.rank) + 1);
  for (const int64_t size : sizes) {
    const auto bytes = static_cast<size_t>(size);
    std::vector<std::byte> host(bytes);
    for (auto& b : host) b = static_cast<std::byte>(rng() & 0x3f);  // finite bf16 values when summed
    DeviceArray<std::byte> send(dev, bytes), recv(dev, bytes);
    dev.to_device(send.data(), host.data(), bytes);
    for (const Op op : kOps) {
      for (int w = 0; w < 2; ++w) run_op(r.world, op, send.data(), recv.data(), bytes);
      r.world.barrier();
      const auto t0 = Clock::now();
      for (int i = 0; i < a.reps; ++i) run_op(r.world, op, send.data(), recv.data(), bytes);
      dev.synchronize();
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / a.reps);
    }
  }
  return ms;
}

void print(const CommArgs& a, const std::vector<Row>& rows, const std::string& backend, const RankPlacement& p) {
  for (const Row& row : rows) {
    const double alg = static_cast<double>(row.bytes) / (row.ms * 1e6);
    const double bus = alg * bus_factor(row.op, a.ranks);
    if (a.json) {
      fmt::print("{}\n", nlohmann::json{{"test", op_name(row.op)},
                                        {"backend", backend},
                                        {"collectives", comm_kind_name(p.kind)},
                                        {"ranks", a.ranks},
                                        {"bytes", row.bytes},
                                        {"ms", row.ms},
                                        {"algbw_GBps", alg},
                                        {"busbw_GBps", bus}}
                             .dump());
    } else {
      fmt::print("| {:>10} | {:>12} | {:>10.4f} | {:>12.2f} | {:>12.2f} |\n", op_name(row.op), row.bytes, row.ms, alg,
                 bus);
    }
  }
}

void run(const CommArgs& a) {
  DSV4_CHECK(a.ranks >= 2, "bench comm: -n {}: at least two ranks", a.ranks);
  std::vector<int64_t> sizes;
  for (const int64_t mib : parse_int_list(a.mib, "--mib")) {
    DSV4_CHECK(mib > 0, "bench comm: --mib {}: sizes are positive", mib);
    sizes.push_back(mib << 20);
  }
  const CommandRanks ranks{{a.ranks, 1, false}, a.backend, parse_numerics(a.numerics), a.threads, a.nodes};
  const RankPlacement placement = place_ranks(a.backend, a.ranks, -1, a.nodes);
  std::vector<std::vector<double>> times(static_cast<size_t>(a.ranks));
  std::string backend;
  run_command_ranks(ranks, [&](RankContext& r) {
    times[static_cast<size_t>(r.rank)] = time_rank(a, sizes, r);
    if (r.local_rank == 0) backend = r.backend.description;
  });
  spdlog::info("bench comm: {} on {}", placement.describe(a.ranks), backend);
  std::vector<Row> rows;
  size_t k = 0;
  for (const int64_t size : sizes) {
    for (const Op op : kOps) {
      double slowest = 0;
      for (const auto& t : times)  // this host's ranks
        if (!t.empty()) slowest = std::max(slowest, t[k]);
      rows.push_back({op, size, slowest});
      ++k;
    }
  }
  if (!a.json) {
    fmt::print("| {:>10} | {:>12} | {:>10} | {:>12} | {:>12} |\n", "collective", "bytes", "ms", "algbw GB/s",
               "busbw GB/s");
    fmt::print("|{:-<12}|{:-<14}|{:-<12}|{:-<14}|{:-<14}|\n", "", "", "", "", "");
  }
  print(a, rows, resolve_backend_name(a.backend), placement);
}

}  // namespace

void setup_bench_comm(CLI::App& cmd) {
  static CommArgs a;
  add_backend_flags(cmd, a.backend, a.threads);
  add_numerics_option(cmd, a.numerics)->group(kEngineFlagGroup);
  cmd.add_option("-n,--ranks", a.ranks,
                 "ranks in all (threads of this process on each host; one GPU each where there are enough)")
      ->capture_default_str();
  add_node_flags(cmd, a.nodes);
  cmd.add_option("--mib", a.mib, "sizes in MiB (comma list)")->capture_default_str();
  cmd.add_option("-r,--repetitions", a.reps, "timed calls per size and collective")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_flag("--json", a.json, "one JSON object per row");
  cmd.callback([] { run(a); });
}

}  // namespace dsv4::tools
