// libFuzzer target for the safetensors header parser: any input either parses into ranges that
// lie inside the input, or throws dsv4::Error. Nothing else (crash, other exception, sanitizer
// report) is allowed.
#include <cstddef>
#include <cstdint>
#include <span>

#include "core/error.h"
#include "io/safetensors.h"

namespace {

// Checks what the parser promises; touching every claimed byte lets ASan catch a bad range.
void check_header(const dsv4::SafetensorsHeader& h, std::span<const uint8_t> file) {
  uint8_t acc = 0;
  for (size_t i = 0; i < h.tensors.size(); ++i) {
    const dsv4::TensorInfo& t = h.tensors[i];
    if (t.begin > t.end || h.data_start + t.end > file.size()) __builtin_trap();
    if (i > 0 && !(h.tensors[i - 1].name < t.name)) __builtin_trap();
    if (t.nbytes() != static_cast<uint64_t>(t.numel()) * dsv4::dtype_size(t.dtype)) __builtin_trap();
    for (uint64_t b = t.begin; b < t.end; ++b) acc ^= file[h.data_start + b];
  }
  asm volatile("" : : "r"(acc));  // keep the reads
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const uint8_t> file(data, size);
  try {
    check_header(dsv4::parse_safetensors_header(file, size, "fuzz.safetensors"), file);
  } catch (const dsv4::Error&) {
  }
  return 0;
}
