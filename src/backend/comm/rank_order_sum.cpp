#include "backend/comm/rank_order_sum.h"

#include <cstdint>

#include "core/error.h"
#include "core/number_formats.h"

namespace dsv4 {

size_t reduce_element_size(DType type) {
  DSV4_CHECK(type == DType::kF32 || type == DType::kBF16, "collectives reduce f32 or bf16 elements, not {}",
             dtype_name(type));
  return dtype_size(type);
}

namespace {

float widen(const void* p, size_t i, DType type) {
  if (type == DType::kF32) return static_cast<const float*>(p)[i];
  return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
}

}  // namespace

void rank_order_sum(std::span<const void* const> in, void* out, size_t count, DType type) {
  reduce_element_size(type);
  DSV4_CHECK(!in.empty(), "rank_order_sum needs at least one input");
  for (size_t i = 0; i < count; ++i) {
    float acc = widen(in[0], i, type);
    for (size_t r = 1; r < in.size(); ++r) acc += widen(in[r], i, type);
    if (type == DType::kF32) {
      static_cast<float*>(out)[i] = acc;
    } else {
      static_cast<uint16_t*>(out)[i] = float_to_bf16(acc);
    }
  }
}

}  // namespace dsv4
