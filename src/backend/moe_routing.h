// The routed pairs of a MoE call grouped by expert, in ascending pair (so token) order within each:
// how both backends' moe_pairs (and the CPU's moe_experts) walk them. Host arrays.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"

namespace dsv4 {

struct MoeRouting {
  std::vector<int64_t> offsets;  // [experts + 1]: expert e's pairs are [offsets[e], offsets[e + 1])
  std::vector<int64_t> pairs;    // pair q = t·topk + k
  std::vector<int64_t> tokens;   // q / topk
  std::vector<float> weights;    // the pair's routing weight (0 without weights)
};

// Throws naming `op` for an expert id outside [0, experts).
inline MoeRouting route_pairs(const char* op, const int32_t* indices, const float* weights, int64_t tokens, int topk,
                              int experts) {
  MoeRouting r;
  r.offsets.assign(static_cast<size_t>(experts) + 1, 0);
  const int64_t n = tokens * topk;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t id = indices[i];
    DSV4_CHECK(id >= 0 && id < experts, "{}: token {} routed to expert {} of {}", op, i / topk, id, experts);
    ++r.offsets[static_cast<size_t>(id) + 1];
  }
  for (int e = 0; e < experts; ++e) r.offsets[static_cast<size_t>(e) + 1] += r.offsets[static_cast<size_t>(e)];
  std::vector<int64_t> fill(r.offsets.begin(), r.offsets.end() - 1);
  r.pairs.resize(static_cast<size_t>(n));
  r.tokens.resize(static_cast<size_t>(n));
  r.weights.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const auto at = static_cast<size_t>(fill[static_cast<size_t>(indices[i])]++);
    r.pairs[at] = i;
    r.tokens[at] = i / topk;
    r.weights[at] = weights ? weights[i] : 0.0f;
  }
  return r;
}

}  // namespace dsv4
