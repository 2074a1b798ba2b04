// The RoPE configuration an op takes (MODEL.md §5.3): plain values, no dependencies (backend/rope.h
// computes the frequency tables).
#pragma once

#include <cstdint>

namespace dsv4 {

struct RopeConfig {
  int rope_dim = 64;             // r: the last r dims of a head, as r/2 interleaved pairs
  double theta = 10000;          // base
  int64_t original_seq_len = 0;  // > 0 turns YaRN on (compressed layers); 0 = plain RoPE
  double factor = 1;             // YaRN frequency divisor for slow pairs
  double beta_fast = 32;
  double beta_slow = 1;
};

}  // namespace dsv4
