// KV groups: the kinds of per-layer state DESIGN.md's KV table lists, sized from a ModelConfig.
//
//   swa             every main layer   one window entry per token                 sliding, last W tokens
//   c4.state        ratio-4 layers     compressor residual row per token (fp32)   sliding, 2 blocks of 4
//   c4.index.state  ratio-4 layers     indexer compressor residual row (fp32)     sliding, 2 blocks of 4
//   c4.kv           ratio-4 layers     one compressed entry per 4 tokens          full
//   c4.index        ratio-4 layers     one indexer key per 4 tokens               full
//   c128.state      ratio-128 layers   compressor residual row per token (fp32)   sliding, current block of 128
//   c128.kv         ratio-128 layers   one compressed entry per 128 tokens        full
//
// The MTP block's own window is not a group here (MTP decoding is not in M1); it would add one more
// sliding group of one layer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/model_config.h"
#include "kv/kv_dtype.h"

namespace dsv4 {

// 256 native token positions: the logical block of every group (prefix hashing, scheduling) and the page
// of the full groups.
inline constexpr int64_t kKvBlockTokens = 256;

enum class KvGroupKind : uint8_t { kFull, kSliding };

struct KvGroupSpec {
  std::string name;
  KvGroupKind kind = KvGroupKind::kFull;
  int ratio = 1;            // native positions per entry: 4 or 128 for full groups, 1 for sliding ones
  std::vector<int> layers;  // main-model layer indices
  int64_t entry_bytes = 0;  // one entry of one layer
  // Sliding groups. Token windows (swa) keep [p − window + 1, p] while token p is computed; compressor
  // states keep the rows of the current block of `window` tokens, and with overlap the previous block too.
  int window = 0;
  bool block_window = false;
  bool overlap = false;

  int num_layers() const { return static_cast<int>(layers.size()); }
  // Rows per layer one live request needs at most (W, 2·m or m).
  int64_t window_rows() const;
  // The lowest position whose row is still read while token p is computed (0 for full groups).
  int64_t first_needed(int64_t p) const {
    if (kind == KvGroupKind::kFull) return 0;
    if (!block_window) return std::max<int64_t>(0, p - window + 1);
    const int64_t start = p / window * window;
    return std::max<int64_t>(0, overlap ? start - window : start);
  }
  // Growth per token over all layers of the group (0 for sliding groups).
  double bytes_per_token() const;
  // Bytes one live request holds whatever its length (0 for full groups).
  int64_t fixed_bytes() const;
};

// The groups of a config in DESIGN.md's order; groups without layers are left out.
std::vector<KvGroupSpec> kv_group_specs(const ModelConfig& c, KvDTypes dtypes);

}  // namespace dsv4
