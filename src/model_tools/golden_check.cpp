#include "model_tools/golden_check.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/number_formats.h"
#include "io/model_config_json.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "model/model_loader.h"
#include "model/paged_kv.h"
#include "model/step_graphs.h"

namespace dsv4 {
namespace fs = std::filesystem;

namespace {

template <typename T>
std::vector<T> read_tensor(const SafetensorsFile& f, const std::string& name, DType dtype) {
  const TensorInfo& t = f.get(name);
  DSV4_CHECK(t.dtype == dtype, "{}: {} is {}, expected {}", f.path().string(), name, dtype_name(t.dtype),
             dtype_name(dtype));
  const auto bytes = f.bytes(t);
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

int64_t scalar_i32(const SafetensorsFile& f, const std::string& name) {
  const auto v = read_tensor<int32_t>(f, name, DType::kI32);
  DSV4_CHECK(v.size() == 1, "{}: {} must hold one value", f.path().string(), name);
  return v[0];
}

// The README's call pattern, through any per-step function of (batch) -> rows.
struct Pattern {
  int64_t B, P, N, L;        // sequences, prefill length, decode steps, ids per sequence
  std::vector<int32_t> ids;  // [B, L]

  ForwardBatch prefill() const {
    ForwardBatch b;
    for (int64_t s = 0; s < B; ++s) b.add(static_cast<int32_t>(s), 0, &ids[static_cast<size_t>(s * L)], P);
    return b;
  }
  // A paged cache for the pattern with every sequence added.
  std::unique_ptr<OwnedPagedCache> cache(const ModelConfig& c, Device& dev) const {
    auto pc = std::make_unique<OwnedPagedCache>(c, static_cast<int>(B), L, B * P, KvDTypes{}, &dev);
    for (int64_t s = 0; s < B; ++s) pc->add(static_cast<int32_t>(s), P);
    return pc;
  }
  // Allocates the batch's positions in the cache (what the scheduler does before a step).
  void allocate(OwnedPagedCache& pc, const ForwardBatch& b) const {
    for (const auto& s : b.seqs)
      pc.allocate(
          s.seq, s.count,
          std::span<const int32_t>(&ids[static_cast<size_t>(s.seq * L)], static_cast<size_t>(s.start + s.count)));
  }
  ForwardBatch decode(int64_t k) const {  // step k >= 1 feeds position P + k - 1
    ForwardBatch b;
    for (int64_t s = 0; s < B; ++s)
      b.add(static_cast<int32_t>(s), P + k - 1, &ids[static_cast<size_t>(s * L + P + k - 1)], 1);
    return b;
  }
};

double rms_ratio(const std::vector<float>& got, const std::vector<float>& want) {
  double mean = 0, ss = 0, diff = 0;
  for (float w : want) mean += w;
  mean /= static_cast<double>(want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ss += (want[i] - mean) * (want[i] - mean);
    diff += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
  }
  return std::sqrt(diff / static_cast<double>(want.size())) / std::sqrt(ss / static_cast<double>(want.size()));
}

int64_t first_argmax(const float* row, int64_t n) {
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (row[i] > row[best]) best = i;
  return best;
}

// Block l alone through the call pattern; returns rms(diff) / rms(value) over every position.
double check_block(Model& model, const LoadedModel& m, const Pattern& pat, const SafetensorsFile& layers, int l,
                   Device& dev) {
  const ModelConfig& c = m.config;
  const int64_t HD = c.hc_mult * c.dim;
  const auto want = read_tensor<uint16_t>(layers, fmt::format("block_out.{}", l), DType::kBF16);
  std::vector<uint16_t> input;
  if (l > 0) input = read_tensor<uint16_t>(layers, fmt::format("block_out.{}", l - 1), DType::kBF16);
  DSV4_CHECK(static_cast<int64_t>(want.size()) == pat.B * pat.L * HD, "{}: block_out.{} has {} values, expected {}",
             layers.path().string(), l, want.size(), pat.B * pat.L * HD);
  auto cache = pat.cache(c, dev);
  double diff = 0, ref = 0;
  std::map<int64_t, std::pair<double, double>> prof;
  auto run = [&](const ForwardBatch& b) {
    // Inputs: embed(ids) broadcast for block 0, else the recorded streams at those positions.
    std::vector<uint16_t> h(static_cast<size_t>(b.tokens() * HD));
    if (l == 0) {
      h = model.embed(b).to_host();
    } else {
      for (const auto& s : b.seqs)
        for (int64_t i = 0; i < s.count; ++i)
          std::copy_n(input.begin() + (s.seq * pat.L + s.start + i) * HD, HD, h.begin() + (s.offset + i) * HD);
    }
    DeviceArray<uint16_t> dh(dev, h);
    pat.allocate(*cache, b);
    model.run_block(l, b, cache->access(), dh.data());
    const auto out = dh.to_host();
    for (const auto& s : b.seqs)
      for (int64_t i = 0; i < s.count; ++i)
        for (int64_t k = 0; k < HD; ++k) {
          const double g = bf16_to_float(out[static_cast<size_t>((s.offset + i) * HD + k)]);
          const double w = bf16_to_float(want[static_cast<size_t>((s.seq * pat.L + s.start + i) * HD + k)]);
          diff += (g - w) * (g - w);
          ref += w * w;
          if (std::getenv("DSV4_GOLDEN_PROFILE")) {
            const int64_t pos = s.start + i, bucket = pos / 64;
            prof[bucket].first += (g - w) * (g - w);
            prof[bucket].second += w * w;
          }
        }
  };
  run(pat.prefill());
  for (int64_t k = 1; k <= pat.N; ++k) run(pat.decode(k));
  for (auto& [b, v] : prof)
    spdlog::info("block {} positions [{}, {}): rms_rel {:.5f}", l, b * 64, b * 64 + 64, std::sqrt(v.first / v.second));
  return std::sqrt(diff / ref);
}

}  // namespace

GoldenThresholds load_thresholds(const fs::path& file, Numerics tier) {
  GoldenThresholds t;
  if (!fs::exists(file)) return t;
  std::ifstream in(file);
  const auto top = nlohmann::json::parse(in, nullptr, false);
  DSV4_CHECK(top.is_object(), "{}: not a JSON object", file.string());
  const bool fast = tier == Numerics::kFast;
  DSV4_CHECK(!fast || (top.contains("fast") && top["fast"].is_object()),
             "{}: no \"fast\" object with the fast tier's thresholds", file.string());
  const nlohmann::json& j = fast ? top["fast"] : top;
  auto get = [&](const char* k) -> std::optional<double> {
    if (!j.contains(k)) return std::nullopt;
    DSV4_CHECK(j[k].is_number(), "{}: {} must be a number", file.string(), k);
    return j[k].get<double>();
  };
  t.max_rms_ratio = get("max_rms_ratio");
  t.min_argmax_agreement = get("min_argmax_agreement");
  t.max_block_rms_rel = get("max_block_rms_rel");
  return t;
}

GoldenResult run_golden_check(const GoldenOptions& o, Ops& ops, Device& dev) {
  const ModelConfig c = load_model_config_ex(o.model, o.load.hf_overrides).config;
  return run_golden_check(o, ops, dev, ModelShard{plan_parallel(c, {})});
}

GoldenResult run_golden_check(const GoldenOptions& o, Ops& ops, Device& dev, const ModelShard& shard) {
  const LoadedModel m = load_model(o.model, o.load);
  const fs::path exp_path = o.expected.empty() ? o.model / "expected.safetensors" : o.expected;
  const auto expected = SafetensorsFile::open(exp_path);
  Pattern pat;
  const TensorInfo& ids = expected.get("input_ids");
  DSV4_CHECK(ids.shape.size() == 2, "{}: input_ids must be [B, P+N]", exp_path.string());
  pat.B = ids.shape[0];
  pat.L = ids.shape[1];
  pat.ids = read_tensor<int32_t>(expected, "input_ids", DType::kI32);
  pat.P = scalar_i32(expected, "prefill_len");
  pat.N = scalar_i32(expected, "decode_steps");
  DSV4_CHECK(pat.P >= 1 && pat.P + pat.N <= pat.L, "{}: prefill_len {} + decode_steps {} exceed {} ids",
             exp_path.string(), pat.P, pat.N, pat.L);
  const auto want = read_tensor<float>(expected, "logits", DType::kF32);
  const int64_t V = m.config.vocab_size;
  DSV4_CHECK(static_cast<int64_t>(want.size()) == (pat.N + 1) * pat.B * V, "{}: logits must be [{}, {}, {}]",
             exp_path.string(), pat.N + 1, pat.B, V);

  Model model(m.config, m.weights, ops, dev, shard);
  if (o.step_mode) model.set_step_mode(*o.step_mode);
  if (!o.side_queues) model.set_overlap(false);
  GoldenResult r;
  {
    auto cache = pat.cache(m.config, dev);
    std::vector<float> got;
    auto step = [&](const ForwardBatch& b) {
      pat.allocate(*cache, b);
      const auto l = model.forward(b, cache->access());
      got.insert(got.end(), l.begin(), l.end());
    };
    step(pat.prefill());
    for (int64_t k = 1; k <= pat.N; ++k) step(pat.decode(k));
    r.rms_ratio = rms_ratio(got, want);
    int64_t agree = 0;
    const int64_t rows = (pat.N + 1) * pat.B;
    for (int64_t i = 0; i < rows; ++i)
      agree += first_argmax(&got[static_cast<size_t>(i * V)], V) == first_argmax(&want[static_cast<size_t>(i * V)], V);
    r.argmax_agreement = static_cast<double>(agree) / static_cast<double>(rows);
    spdlog::info("golden: end to end rms_ratio {:.4f}, argmax agreement {}/{}", r.rms_ratio, agree, rows);
    const StepGraphStats g = model.graph_stats();
    spdlog::info("golden: decode steps {} eager, {} recorded, {} replayed, {} failed to record", g.eager, g.recorded,
                 g.replayed, g.failed);
  }
  const fs::path layers_path = o.layers.empty() ? o.model / "expected_layers.safetensors" : o.layers;
  if (o.blocks && fs::exists(layers_path)) {
    const auto layers = SafetensorsFile::open(layers_path);
    for (int l = 0; l < m.config.n_layers; ++l) {
      r.blocks.push_back({l, check_block(model, m, pat, layers, l, dev)});
      spdlog::info("golden: block {} (ratio {}) rms_rel {:.5f}", l, m.config.compress_ratio(l),
                   r.blocks.back().rms_rel);
    }
  }
  r.thresholds = o.thresholds;
  const auto& t = r.thresholds;
  if (t.max_rms_ratio && !(r.rms_ratio <= *t.max_rms_ratio))
    r.failures.push_back(fmt::format("rms_ratio {:.4f} > {}", r.rms_ratio, *t.max_rms_ratio));
  if (t.min_argmax_agreement && !(r.argmax_agreement >= *t.min_argmax_agreement))
    r.failures.push_back(fmt::format("argmax_agreement {:.4f} < {}", r.argmax_agreement, *t.min_argmax_agreement));
  for (const auto& b : r.blocks)
    if (t.max_block_rms_rel && !(b.rms_rel <= *t.max_block_rms_rel))
      r.failures.push_back(fmt::format("block {} rms_rel {:.5f} > {}", b.layer, b.rms_rel, *t.max_block_rms_rel));
  r.pass = r.failures.empty();
  return r;
}

}  // namespace dsv4
