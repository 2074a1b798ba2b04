// The numerics tiers (spec/NUMERICS.md): `exact` forms every sum as the reference's exact block sums,
// bit-identical across backends (the oracle); `fast` forms sums as DeepSeek's tensor-core kernels
// do, or more accurately. The CPU backend implements exact only; CUDA defaults to fast.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv4 {

enum class Numerics : uint8_t { kExact, kFast };

inline std::string_view numerics_name(Numerics n) { return n == Numerics::kFast ? "fast" : "exact"; }

// "exact" or "fast"; nullopt for anything else.
inline std::optional<Numerics> parse_numerics(std::string_view s) {
  if (s == "exact") return Numerics::kExact;
  if (s == "fast") return Numerics::kFast;
  return std::nullopt;
}

}  // namespace dsv4
