#include "backend/cpu/cpu_support.h"

#include <array>

namespace dsv4::cpu {

const float* e4m3_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) t[static_cast<size_t>(c)] = e4m3_to_float(static_cast<uint8_t>(c));
    return t;
  }();
  return table.data();
}

}  // namespace dsv4::cpu
