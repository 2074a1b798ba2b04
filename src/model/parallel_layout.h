// ParallelLayout: which rank holds which part of the model when it runs on several GPUs (tensor,
// data and expert parallelism in vLLM's terms), decided once from the config and the flags. Pure host
// code: the model, the engine, kv-plan and inspect read the same plan.
//
// The exact tier shards by gathering only: every output element is computed whole on one rank and
// collected with an all-gather (or an all-to-all for expert dispatch), never summed across ranks, so a
// sharded run gives the bits of one rank (docs/architecture.md, "Several GPUs").
//  * Attention heads are split by tensor-parallel rank (wq_b's rows, the sinks). The one shared K=V
//    head, the query/KV latents (wq_a, wkv), the compressors, the indexer and mHC are replicated: every
//    TP rank holds the whole KV of its data-parallel rank's sequences.
//  * wo_a, wo_b, the shared expert and, without expert parallelism, each routed expert are split by
//    output rows where the rows divide into whole scale blocks; otherwise that weight is replicated.
//  * With expert parallelism the routed experts are owned whole, E / (tp x dp) per rank, across every
//    rank of every data-parallel replica.
//  * The head's vocabulary rows are split by TP rank; the embedding is replicated.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/model_config.h"

namespace dsv4 {

// The flags: --tensor-parallel-size, --data-parallel-size, --enable-expert-parallel.
struct ParallelConfig {
  int tp = 1;
  int dp = 1;
  bool expert_parallel = false;

  int world() const { return tp * dp; }
  // "tp 2 x dp 1, experts sliced by tp" and the like.
  std::string describe() const;
  bool operator==(const ParallelConfig&) const = default;
};

// Rows [begin, end) of a weight on one rank.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// How a weight's output rows are held across the TP ranks: in `parts` equal slices (1 = replicated).
struct RowSplit {
  int64_t rows = 0;
  int parts = 1;

  bool split() const { return parts > 1; }
  RowRange range(int tp_rank) const;
};

// Splits `rows` over tp ranks in whole units of `granule` rows (a scale block, a head), or replicates.
RowSplit split_rows(int64_t rows, int64_t granule, int tp);

// One rank's place: its data-parallel replica and tensor-parallel index (rank = dp_rank * tp + tp_rank).
struct RankPlace {
  int rank = 0;
  int dp_rank = 0;
  int tp_rank = 0;
};

struct ParallelLayout {
  ParallelConfig config;
  RowSplit heads;         // attention heads (wq_b in whole heads, attn_sink)
  RowSplit wo_a;          // o_groups x o_lora_rank rows
  RowSplit wo_b;          // dim rows
  RowSplit shared_inter;  // the shared expert's w1/w3 rows (moe_inter_dim)
  RowSplit shared_out;    // the shared expert's w2 rows (dim)
  RowSplit routed_inter;  // each routed expert's w1/w3 rows when experts are sliced (parts 1 under EP)
  RowSplit routed_out;    // each routed expert's w2 rows when sliced
  RowSplit vocab;         // head rows
  int ep_size = 1;        // ranks the routed experts are spread over (tp x dp under EP, else 1)
  int experts = 0;        // routed experts per layer in the model

  // Each rank's wo_a rows read only its own heads' outputs (whole groups), so the attention output
  // needs no all-gather before wo_a.
  bool wo_a_local = true;

  RankPlace place(int rank) const;
  // Routed experts rank `rank` holds: all of them unless expert-parallel.
  RowRange experts_of(int rank) const;
};

// Throws dsv4::Error for a layout the model cannot take (heads, indexer heads or experts that do not
// divide), naming layouts of the same number of GPUs that work.
ParallelLayout plan_parallel(const ModelConfig& cfg, const ParallelConfig& pc);

// Layouts of `world` GPUs the model takes, most tensor-parallel first.
std::vector<ParallelConfig> working_layouts(const ModelConfig& cfg, int world);

// Bytes of the checkpoint's tensors (as the release stores them) that rank `rank` holds.
uint64_t weight_bytes_of_rank(const ModelConfig& cfg, const ParallelLayout& layout, int rank);

// Throws for a layout of more than one rank, for the commands that run one Model themselves (bench step,
// golden-check); the engine runs a replica's ranks (serve, generate, bench latency).
void require_one_rank(const ParallelLayout& layout, std::string_view command);

// Lines for the startup summary, kv-plan and inspect: the layout, then one line per rank.
std::vector<std::string> describe_layout(const ModelConfig& cfg, const ParallelLayout& layout);

}  // namespace dsv4
