// RoPE frequency tables of DeepSeek-V4 (MODEL.md §5.3), computed exactly as the reference's
// precompute_freqs_cis: fp32 base frequencies, YaRN ramp in fp32 with double-precision correction
// range. Both backends take their frequencies from here so that the angles agree bit for bit.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

#include "backend/rope_config.h"
#include "core/error.h"
#include "core/model_config.h"

namespace dsv4 {

// Ratio-0 layers: rope_theta without YaRN; ratio-4/128 layers: compress_rope_theta with YaRN.
inline RopeConfig rope_config(const ModelConfig& c, int compress_ratio) {
  RopeConfig r;
  r.rope_dim = c.rope_head_dim;
  r.theta = compress_ratio ? c.compress_rope_theta : c.rope_theta;
  r.original_seq_len = compress_ratio ? c.original_seq_len : 0;
  r.factor = c.rope_factor;
  r.beta_fast = c.beta_fast;
  r.beta_slow = c.beta_slow;
  return r;
}

struct YarnRange {
  int low = 0;
  int high = 0;
};

// The pair range over which YaRN ramps from the original to the divided frequency (V4-Flash: 15, 25).
inline YarnRange yarn_range(const RopeConfig& c) {
  auto corr = [&](double rotations) {
    return c.rope_dim * std::log(static_cast<double>(c.original_seq_len) / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(c.theta));
  };
  return {std::max(static_cast<int>(std::floor(corr(c.beta_fast))), 0),
          std::min(static_cast<int>(std::ceil(corr(c.beta_slow))), c.rope_dim - 1)};
}

// f_i for the rope_dim/2 pairs, all fp32 steps as in the reference.
inline std::vector<float> rope_frequencies(const RopeConfig& c) {
  DSV4_CHECK(c.rope_dim > 0 && c.rope_dim % 2 == 0, "rope: rope_dim {} must be positive and even", c.rope_dim);
  DSV4_CHECK(c.theta > 0 && c.factor > 0, "rope: theta {} and factor {} must be positive", c.theta, c.factor);
  const int half = c.rope_dim / 2;
  const float base = static_cast<float>(c.theta);
  std::vector<float> f(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(c.rope_dim);
    f[static_cast<size_t>(i)] = 1.0f / std::pow(base, e);
  }
  if (c.original_seq_len <= 0) return f;
  const YarnRange r = yarn_range(c);
  // The reference nudges an empty range to (high + 0.001) - low, evaluated in double.
  const float span = static_cast<float>(r.low == r.high ? (r.high + 0.001) - r.low : r.high - r.low);
  const float factor = static_cast<float>(c.factor);
  for (int i = 0; i < half; ++i) {
    const float ramp = std::clamp((static_cast<float>(i) - static_cast<float>(r.low)) / span, 0.0f, 1.0f);
    const float smooth = 1.0f - ramp;
    const float fi = f[static_cast<size_t>(i)];
    f[static_cast<size_t>(i)] = fi / factor * (1.0f - smooth) + fi * smooth;
  }
  return f;
}

}  // namespace dsv4
