#include "core/env.h"

#include <fmt/format.h>

#include <array>
#include <initializer_list>
#include <utility>

#include "core/error.h"

namespace dsv4 {
namespace {

struct Switch {
  const char* name;
  std::initializer_list<std::string_view> values;  // besides unset or empty (the default)
};

// Every on/off or named-mode switch the engine reads (env_switch), and what each takes; numbers such
// as DSV4_GEMM_IMMA_MIN_ROWS are parsed where they are read.
const std::array<Switch, 8> kSwitches{{
    {"DSV4_CUDA_GRAPHS", {"0", "1"}},
    {"DSV4_MOE_SIDE", {"0", "1"}},
    {"DSV4_HC_PRODUCTS", {"0", "1"}},
    {"DSV4_HC_RING", {"0", "1"}},
    {"DSV4_GEMM_CUBLASLT", {"0", "1"}},
    {"DSV4_GEMM_IMMA", {"0", "1"}},
    {"DSV4_GEMM_LT_EXPERTS_RESIDENT", {"0", "1"}},
    {"DSV4_INDEXER_DOTS", {"cuda-cores", "mma", "wgmma"}},
}};

// Switches that were replaced, and by what: set, they fail the check instead of being ignored. The GEMM
// switches of kernels measured faster than their alternatives went with the alternatives' code
// (docs/perf-history.md names the measurements).
constexpr const char* kAlwaysOn = "the kernel it switched is always taken where it applies (measured faster)";
const std::array<std::pair<const char*, const char*>, 36> kRetired{{
    {"DSV4_HC_CLUSTER",
     "hc_post_pre's last CTA finishes a token (one cluster a token measured 0.29 ms slower a b1 step)"},
    {"DSV4_ATTENTION_CLUSTER", "split attention lists merge in the combine kernel (a cluster merge measured slower)"},
    {"DSV4_ATTENTION_WGMMA",
     "prefill attention's shadow runs on sixteen mma.sync warps (two wgmma warpgroups a token measured 37-79% slower)"},
    {"DSV4_GATE_CLUSTER", "the MoE gate is a GEMV and a routing kernel (one cluster a token measured slower)"},
    {"DSV4_GEMM_GEMV_ITEMS", "the few-row kernel runs its column tiles by one wave (measured faster)"},
    {"DSV4_GEMM", "use --numerics fast or exact (DSV4_NUMERICS)"},
    {"DSV4_GEMM_RING", kAlwaysOn},
    {"DSV4_PDL", "kernels always launch with programmatic dependent launch (measured faster)"},
    {"DSV4_GEMM_FP4_PER128",
     "FP4 sums per 32-wide block in the few-row and mma.sync kernels (per 128 measured slower)"},
    {"DSV4_GEMM_FP4_PREWIDEN", "FP4 weights are widened before wgmma calls of at least 1024 rows an expert (measured)"},
    {"DSV4_INDEXER_MMA", "the fast tier's indexer dots run on the tensor cores (measured 1.4-4x faster)"},
    {"DSV4_HC_FUSED_NORM", "hc_pre's finishing kernel applies the sublayer's norm (measured faster)"},
    {"DSV4_GEMM_FP4_MMA_RING", "the mma.sync kernel keeps three FP4 stages a warp (four measured 4-11% slower)"},
    {"DSV4_GEMM_FP4_SPLIT", "FP4 codes widen signed, one MMA a step (split by sign measured 2-12% slower)"},
    {"DSV4_GEMM_GROUPED_RESIDENT",
     "grouped mma.sync calls keep their activations resident where they fit (staged measured 1-7% slower)"},
    {"DSV4_GEMM_FP4_INT", kAlwaysOn},
    {"DSV4_GEMM_GEMV", kAlwaysOn},
    {"DSV4_GEMM_GEMV_PAIR", kAlwaysOn},
    {"DSV4_GEMM_FP8_GEMV", kAlwaysOn},
    {"DSV4_GEMM_IMMA_SKINNY", kAlwaysOn},
    {"DSV4_GEMM_PLAIN_WIDE", kAlwaysOn},
    {"DSV4_GEMM_FAST_GEMV_BF16", kAlwaysOn},
    {"DSV4_GEMM_WGMMA", "the wgmma kernel takes grouped calls from DSV4_GEMM_WGMMA_MIN_ROWS rows a weight"},
    {"DSV4_GEMM_GEMV_FP4_DEPTH", "the few-row kernel keeps 4 FP4 blocks in flight (6 measured no faster)"},
    {"DSV4_GEMM_GEMV_GATHER",
     "the MoE quantizes its gathered rows in one launch (the in-kernel gather measured no faster)"},
    {"DSV4_GEMM_LT_WIDEN_AHEAD",
     "cuBLASLt's experts' route always re-encodes a pass ahead on a stream of its own (measured 1-4% faster)"},
    {"DSV4_GEMM_WGMMA_SPECIALIZED",
     "the wgmma kernel runs a CTA a tile, warpgroups in lockstep (the warp-specialized form measured 5-39% slower)"},
    {"DSV4_GEMM_GEMV_WGMMA",
     "the few-row kernel sums FP4 on mma.sync (wgmma's FP8 accumulation failed the replay gate at decode: "
     "docs/perf.md)"},
    {"DSV4_GEMM_GEMV_FP4_STAGED",
     "the few-row kernel always stages FP4 codes through shared memory (measured 5-21% faster than 4-byte loads)"},
    {"DSV4_GEMM_IMMA_STAGES",
     "the exact tier's int8 kernel keeps two K stages (four measured 10% slower on the MoE, 2.5-7% faster on "
     "dense calls: docs/perf-history.md, session 10)"},
    {"DSV4_GEMM_GEMV_EARLY",
     "the few-row kernel always starts grouped calls with settled offsets before its wait (measured faster)"},
    {"DSV4_GEMM_WGMMA_FEW_BF16",
     "the swapped wgmma kernel takes quantize_act's codes (quantizing its own bf16 rows measured 0.4-1.7 ms slower "
     "a b16-b64 step)"},
    {"DSV4_GEMM_GEMV_FP4_CTAS",
     "the few-row kernel runs FP4 weights at two CTAs an SM (three measured 0.1-0.7 ms slower a b16-b32 step)"},
    {"DSV4_ATTENTION_MAX_SPLITS",
     "sparse attention splits lists as its cost model says (at most one or two splits measured slower a step)"},
    {"DSV4_GEMM_GEMV_PREFETCH", "the few-row kernels prefetch nothing toward L2 (measured slower: docs/perf.md)"},
    {"DSV4_GEMM_FP4_SHIFT",
     "FP4 codes and scales are always decoded by shifts and table words (the table form measured 2-22% slower)"},
}};

std::string_view checked(const Switch& s) {
  const std::string_view v = env_value(s.name);
  if (v.empty()) return v;
  bool ok = false;
  for (std::string_view allowed : s.values) ok |= v == allowed;
  DSV4_CHECK(ok, "{}={}: expected {} (or unset)", s.name, v, fmt::join(s.values, " or "));
  return v;
}

}  // namespace

std::string_view env_switch(const char* name) {
  for (const Switch& s : kSwitches) {
    if (std::string_view(s.name) == name) return checked(s);
  }
  fail("env_switch: {} is not a known switch (add it to core/env.cpp)", name);
}

void check_env_switches() {
  for (const auto& [name, instead] : kRetired) {
    DSV4_CHECK(env_value(name).empty(), "{} is no longer read: {}", name, instead);
  }
  for (const Switch& s : kSwitches) checked(s);
}

}  // namespace dsv4
