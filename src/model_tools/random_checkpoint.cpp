#include "model_tools/random_checkpoint.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "core/error.h"
#include "core/number_formats.h"
#include "core/quant.h"
#include "io/model_config_json.h"
#include "io/safetensors_writer.h"
#include "model/weights.h"

namespace dsv4 {
namespace fs = std::filesystem;

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

// A quantized weight and its scales come from one float matrix; whichever of the two tensors is
// written first quantizes it, the other takes its half, and the bytes are freed once both are out.
struct QuantizedPair {
  std::mutex mu;
  bool ready = false;
  std::vector<uint8_t> data, scale;
};

void quantize_pair(QuantizedPair& q, uint64_t key, Init init, DType dtype, int64_t rows, int64_t cols) {
  std::vector<float> w(static_cast<size_t>(rows * cols));
  fill_float(key, init, w);
  // Row blocks quantize independently (128-row blocks for FP8, single rows for FP4).
  const int64_t step = dtype == DType::kF8E4M3 ? 128 : 1;
  const int64_t scols = dtype == DType::kF8E4M3 ? (cols + 127) / 128 : cols / 32;
  const int64_t data_cols = dtype == DType::kF8E4M3 ? cols : cols / 2;
  q.data.resize(static_cast<size_t>(rows * data_cols));
  q.scale.resize(static_cast<size_t>((rows + step - 1) / step * scols));
  const int64_t nblocks = (rows + step - 1) / step;
  parallel_rows(
      nblocks,
      [&](int64_t b0, int64_t b1) {
        const int64_t r0 = b0 * step, r1 = std::min(rows, b1 * step);
        const auto sz = [](int64_t n) { return static_cast<size_t>(n); };
        std::span<const float> wi(w.data() + r0 * cols, sz((r1 - r0) * cols));
        std::span<uint8_t> di(q.data.data() + r0 * data_cols, sz((r1 - r0) * data_cols));
        std::span<uint8_t> si(q.scale.data() + b0 * scols, sz((b1 - b0) * scols));
        if (dtype == DType::kF8E4M3)
          quantize_weight_fp8(wi, r1 - r0, cols, di, si);
        else
          quantize_weight_fp4(wi, r1 - r0, cols, di, si);
      },
      /*serial_below=*/nblocks * cols < (1 << 16) ? nblocks + 1 : 2);
  q.ready = true;
}

void take(std::vector<uint8_t>& src, std::span<uint8_t> out) {
  DSV4_CHECK(src.size() == out.size(), "make-tiny: internal size mismatch ({} vs {})", src.size(), out.size());
  std::copy(src.begin(), src.end(), out.begin());
  std::vector<uint8_t>().swap(src);
}

// Adds a FP8/FP4 weight and its ".scale" tensor, both drawn from one float matrix [out, in].
void add_quantized(ShardedCheckpointWriter& writer, const TensorSpec& s, uint64_t seed, const ModelConfig& cfg) {
  const bool fp4 = s.dtype == DType::kI8;
  const int64_t rows = s.shape[0], cols = fp4 ? 2 * s.shape[1] : s.shape[1];
  const std::vector<int64_t> scale_shape =
      fp4 ? std::vector<int64_t>{rows, cols / 32} : std::vector<int64_t>{(rows + 127) / 128, (cols + 127) / 128};
  auto pair = std::make_shared<QuantizedPair>();
  const uint64_t key = key_of(seed, s.name);
  const Init init = init_for(s.name, cols, cfg);
  const DType dt = s.dtype;
  auto part = [pair, key, init, dt, rows, cols](bool scale, std::span<uint8_t> o) {
    std::lock_guard lock(pair->mu);
    if (!pair->ready) quantize_pair(*pair, key, init, dt, rows, cols);
    take(scale ? pair->scale : pair->data, o);
  };
  writer.add_lazy(s.name, s.dtype, s.shape, [part](std::span<uint8_t> o) { part(false, o); });
  const std::string prefix = s.name.substr(0, s.name.rfind('.'));
  writer.add_lazy(prefix + ".scale", DType::kF8E8M0, scale_shape, [part](std::span<uint8_t> o) { part(true, o); });
}

void write_json(const fs::path& p, const nlohmann::ordered_json& j) {
  std::ofstream f(p);
  f << j.dump(2) << "\n";
  DSV4_CHECK(f.good(), "cannot write {}", p.string());
}

}  // namespace

RandomCheckpointStats write_random_checkpoint(const ModelConfig& cfg, uint64_t seed, const fs::path& out,
                                              uint64_t max_shard_bytes) {
  cfg.validate();
  fs::create_directories(out / "inference");
  write_json(out / "config.json", to_hf_config_json(cfg));
  write_json(out / "inference" / "config.json", to_inference_config_json(cfg));
  write_json(out / "generation_config.json", {{"bos_token_id", cfg.bos_token_id},
                                              {"eos_token_id", cfg.eos_token_id},
                                              {"do_sample", true},
                                              {"temperature", 1.0},
                                              {"top_p", 1.0}});

  const auto specs = checkpoint_tensor_specs(cfg);
  ShardedCheckpointWriter writer(max_shard_bytes);
  writer.set_metadata("format", "pt");
  std::set<std::string> scales;  // added with their weights, still to be seen in the spec list
  RandomCheckpointStats stats;
  for (const auto& s : specs) {
    const int64_t in = s.shape.size() == 2 ? s.shape[1] : 1;
    stats.num_tensors++;
    int64_t numel = 1;
    for (int64_t d : s.shape) numel *= d;
    stats.tensor_bytes += static_cast<uint64_t>(numel) * dtype_size(s.dtype);
    if (s.dtype == DType::kF8E8M0) {  // written together with its weight, which precedes it
      DSV4_CHECK(scales.erase(s.name) == 1, "make-tiny: scale {} has no weight before it", s.name);
      continue;
    }
    if (s.dtype == DType::kF8E4M3 || s.dtype == DType::kI8) {
      add_quantized(writer, s, seed, cfg);
      scales.insert(s.name.substr(0, s.name.rfind('.')) + ".scale");
      continue;
    }
    const uint64_t key = key_of(seed, s.name);
    const Init init = init_for(s.name, in, cfg);
    if (s.dtype == DType::kBF16) {
      writer.add_lazy(s.name, s.dtype, s.shape, [key, init](std::span<uint8_t> o) { fill_bf16(key, init, o); });
    } else if (s.dtype == DType::kF32) {
      writer.add_lazy(s.name, s.dtype, s.shape, [key, init](std::span<uint8_t> o) {
        fill_float(key, init, {reinterpret_cast<float*>(o.data()), o.size() / 4});
      });
    } else if (s.dtype == DType::kI64) {
      const int64_t rows = s.shape[0];
      const int k = static_cast<int>(s.shape[1]), experts = cfg.n_routed_experts;
      writer.add_lazy(s.name, s.dtype, s.shape,
                      [key, rows, k, experts](std::span<uint8_t> o) { fill_tid2eid(key, rows, k, experts, o); });
    } else {
      fail("make-tiny: no generator for {} ({})", s.name, dtype_name(s.dtype));
    }
  }
  DSV4_CHECK(scales.empty(), "make-tiny: {} scale tensors were never listed", scales.size());
  stats.num_shards = writer.write(out).size();
  return stats;
}

}  // namespace dsv4
