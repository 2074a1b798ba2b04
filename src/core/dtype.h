// Element types of checkpoint tensors and caches, with their safetensors names.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace dsv4 {

enum class DType : uint8_t {
  kBF16,
  kF16,
  kF32,
  kF64,
  kF8E4M3,  // float8_e4m3fn
  kF8E8M0,  // float8_e8m0fnu (ue8m0 power-of-two scales)
  kI8,      // also packed FP4 e2m1 pairs in the release
  kU8,
  kI16,
  kI32,
  kI64,
  kBool,
};

// Bytes per element.
size_t dtype_size(DType t);
// The safetensors name ("BF16", "F8_E4M3", ...).
std::string_view dtype_name(DType t);
// Parses a safetensors dtype name; nullopt for names this engine does not know.
std::optional<DType> parse_dtype(std::string_view name);

}  // namespace dsv4
