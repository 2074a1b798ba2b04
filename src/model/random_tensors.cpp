#include "model/random_tensors.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/number_formats.h"
#include "core/quant.h"

namespace dsv4 {
namespace {

// ---- counter-based randomness: value i of a tensor depends only on (seed, name, i) -------------

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t key_of(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull ^ seed;  // FNV-1a over the name, then mixed
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001b3ull;
  return mix64(h ^ mix64(seed));
}

// An approximately normal value (Irwin-Hall sum of four 16-bit uniforms, mean 0, std 1): one hash,
// no transcendental functions, so tens of GB of weights generate in seconds.
float normal_at(uint64_t key, uint64_t i) {
  const uint64_t h = mix64(key ^ (i * 0xd1342543de82ef95ull));
  const uint32_t sum = static_cast<uint32_t>((h & 0xffff) + ((h >> 16) & 0xffff) + ((h >> 32) & 0xffff) + (h >> 48));
  return (static_cast<float>(sum) * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;  // sqrt(12 / 4)
}

// Splits [0, n) over the cores; each index's value does not depend on the split.
template <typename F>
void parallel_rows(int64_t n, F&& f, int64_t serial_below = 1 << 16) {
  const int64_t threads = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 64);
  if (n < serial_below || threads == 1) return f(int64_t{0}, n);
  std::vector<std::jthread> pool;
  const int64_t step = (n + threads - 1) / threads;
  for (int64_t b = 0; b < n; b += step) pool.emplace_back([&f, b, step, n] { f(b, std::min(n, b + step)); });
}

// ---- how each tensor is drawn ----------------------------------------------------------------

struct Init {
  float mean = 0.0f;
  float std = 1.0f;
};

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}
bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// Scales for healthy activations (see the header); `in` is the input width of a linear.
Init init_for(const std::string& name, int64_t in, const ModelConfig& c) {
  const float unit = 1.0f / std::sqrt(static_cast<float>(in));
  const float hc_std = 0.5f / std::sqrt(static_cast<float>(c.hc_dim()));
  if (name == "embed.weight") return {0.0f, 1.0f};
  if (name == "head.weight") return {0.0f, 3.0f * unit};
  if (ends_with(name, "attn.kv_norm.weight") || ends_with(name, "attn.compressor.norm.weight")) return {3.0f, 0.1f};
  if (ends_with(name, "norm.weight")) return {1.0f, 0.05f};
  if (ends_with(name, "attn_sink")) return {3.0f, 0.5f};
  if (ends_with(name, ".ape")) return {0.0f, 0.1f};
  if (ends_with(name, "gate.bias")) return {0.0f, 0.1f};
  if (ends_with(name, "_fn")) return {0.0f, hc_std};
  if (ends_with(name, "_base")) return {0.0f, 0.1f};
  if (ends_with(name, "_scale") && contains(name, "hc_")) return {1.0f, 0.1f};
  if (contains(name, "wo_a.")) return {0.0f, unit / 3.0f};  // attention output rms is about 3 (kv_norm)
  if (contains(name, "wo_b.") || contains(name, ".w2.")) return {0.0f, 0.5f * unit};  // below the residual
  return {0.0f, unit};
}

void fill_float(uint64_t key, Init init, std::span<float> out) {
  parallel_rows(static_cast<int64_t>(out.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      out[static_cast<size_t>(i)] = init.mean + init.std * normal_at(key, static_cast<uint64_t>(i));
  });
}

void fill_bf16(uint64_t key, Init init, std::span<uint8_t> out) {
  auto* p = reinterpret_cast<uint16_t*>(out.data());
  parallel_rows(static_cast<int64_t>(out.size() / 2), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      p[i] = float_to_bf16(init.mean + init.std * normal_at(key, static_cast<uint64_t>(i)));
  });
}

// tid2eid: each row a random choice of distinct experts (a partial Fisher-Yates shuffle).
void fill_tid2eid(uint64_t key, int64_t rows, int k, int experts, std::span<uint8_t> out) {
  auto* p = reinterpret_cast<int64_t*>(out.data());
  std::vector<int64_t> perm(static_cast<size_t>(experts));
  for (int64_t r = 0; r < rows; ++r) {
    for (int e = 0; e < experts; ++e) perm[static_cast<size_t>(e)] = e;
    for (int j = 0; j < k; ++j) {
      const uint64_t pick = j + mix64(key + static_cast<uint64_t>(r * k + j)) % static_cast<uint64_t>(experts - j);
      std::swap(perm[static_cast<size_t>(j)], perm[pick]);
      p[r * k + j] = perm[static_cast<size_t>(j)];
    }
  }
}

uint64_t numel(const std::vector<int64_t>& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

void check_size(const std::string& name, std::span<uint8_t> out, uint64_t bytes) {
  DSV4_CHECK(out.size() == bytes, "random weights: {} takes {} bytes, given {}", name, bytes, out.size());
}

}  // namespace

std::string RandomTensors::scale_name(const TensorSpec& weight) {
  return weight.name.substr(0, weight.name.rfind('.')) + ".scale";
}

std::vector<int64_t> RandomTensors::scale_shape(const TensorSpec& weight) {
  const int64_t rows = weight.shape[0];
  if (weight.dtype == DType::kI8) return {rows, 2 * weight.shape[1] / 32};
  return {(rows + 127) / 128, (weight.shape[1] + 127) / 128};
}

void RandomTensors::fill(const TensorSpec& s, std::span<uint8_t> out) const {
  check_size(s.name, out, numel(s.shape) * dtype_size(s.dtype));
  const uint64_t key = key_of(seed_, s.name);
  const Init init = init_for(s.name, s.shape.size() == 2 ? s.shape[1] : 1, cfg_);
  switch (s.dtype) {
    case DType::kBF16:
      return fill_bf16(key, init, out);
    case DType::kF32:
      return fill_float(key, init, {reinterpret_cast<float*>(out.data()), out.size() / 4});
    case DType::kI64:
      return fill_tid2eid(key, s.shape[0], static_cast<int>(s.shape[1]), cfg_.n_routed_experts, out);
    default:
      fail("random weights: no generator for {} ({})", s.name, dtype_name(s.dtype));
  }
}

void RandomTensors::fill_quantized(const TensorSpec& weight, std::span<uint8_t> data, std::span<uint8_t> scale) const {
  const bool fp8 = weight.dtype == DType::kF8E4M3;
  const int64_t rows = weight.shape[0], cols = fp8 ? weight.shape[1] : 2 * weight.shape[1];
  check_size(weight.name, data, numel(weight.shape));
  check_size(scale_name(weight), scale, numel(scale_shape(weight)));
  std::vector<float> w(static_cast<size_t>(rows * cols));
  fill_float(key_of(seed_, weight.name), init_for(weight.name, cols, cfg_), w);
  // Row blocks quantize independently (128-row blocks for FP8, single rows for FP4).
  const int64_t step = fp8 ? 128 : 1;
  const int64_t scols = fp8 ? (cols + 127) / 128 : cols / 32;
  const int64_t data_cols = fp8 ? cols : cols / 2;
  const int64_t nblocks = (rows + step - 1) / step;
  parallel_rows(
      nblocks,
      [&](int64_t b0, int64_t b1) {
        const int64_t r0 = b0 * step, r1 = std::min(rows, b1 * step);
        const auto sz = [](int64_t n) { return static_cast<size_t>(n); };
        std::span<const float> wi(w.data() + r0 * cols, sz((r1 - r0) * cols));
        std::span<uint8_t> di(data.data() + r0 * data_cols, sz((r1 - r0) * data_cols));
        std::span<uint8_t> si(scale.data() + b0 * scols, sz((b1 - b0) * scols));
        if (fp8)
          quantize_weight_fp8(wi, r1 - r0, cols, di, si);
        else
          quantize_weight_fp4(wi, r1 - r0, cols, di, si);
      },
      /*serial_below=*/nblocks * cols < (1 << 16) ? nblocks + 1 : 2);
}

}  // namespace dsv4
