#include "model/weights.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <span>
#include <thread>
#include <unordered_set>

#include "core/error.h"

namespace dsv4 {
namespace {

using Shape = std::vector<int64_t>;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Collects every binding problem so that one error lists them all.
class Binder {
 public:
  using Locate = std::function<const uint8_t*(const TensorSpec&)>;
  // With a checkpoint it binds and checks; without one it binds to what `locate` says (nullptr when
  // it is empty) and lists what a checkpoint must hold into `specs` (when given).
  Binder(const Checkpoint* ckpt, const ModelConfig& cfg, std::vector<TensorSpec>* specs = nullptr, Locate locate = {},
         const std::set<std::string>* dropped = nullptr)
      : ckpt_(ckpt), cfg_(cfg), specs_(specs), locate_(std::move(locate)), dropped_(dropped) {}

  // Whether bound bytes may be read (a checkpoint's are; a layout's may not exist yet).
  bool checks() const { return ckpt_ != nullptr; }

  const uint8_t* tensor(const std::string& name, DType dtype, const Shape& shape) {
    if (!ckpt_) {
      TensorSpec s{name, dtype, shape};
      const uint8_t* p = locate_ ? locate_(s) : nullptr;
      if (specs_) specs_->push_back(std::move(s));
      return p;
    }
    expected_.insert(name);
    const TensorInfo* t = ckpt_->find(name);
    if (!t) {
      missing_.push_back(name);
      return nullptr;
    }
    if (t->dtype != dtype || t->shape != shape) {
      wrong_.push_back(fmt::format("{}: expected {} {}, found {} {}", name, dtype_name(dtype), shape,
                                   dtype_name(t->dtype), t->shape));
      return nullptr;
    }
    const auto bytes = ckpt_->bytes(*t);
    if (dtype == DType::kF8E4M3 || dtype == DType::kF8E8M0) scans_.push_back({name, dtype, bytes});
    return bytes.data();
  }
  const uint16_t* bf16(const std::string& name, const Shape& shape) {
    return reinterpret_cast<const uint16_t*>(tensor(name, DType::kBF16, shape));
  }
  const float* f32(const std::string& name, const Shape& shape) {
    return reinterpret_cast<const float*>(tensor(name, DType::kF32, shape));
  }
  NormWeight norm(const std::string& prefix, int64_t dim) { return {bf16(prefix + ".weight", {dim}), dim}; }

  // FP8 e4m3 weight with 128x128 UE8M0 block scales.
  LinearWeight fp8(const std::string& prefix, int64_t out, int64_t in) {
    return {WeightFormat::kFp8, tensor(prefix + ".weight", DType::kF8E4M3, {out, in}),
            tensor(prefix + ".scale", DType::kF8E8M0, {ceil_div(out, 128), ceil_div(in, 128)}), out, in};
  }
  // Packed FP4 weight (I8 [out, in/2]) with 1x32 UE8M0 scales.
  LinearWeight fp4(const std::string& prefix, int64_t out, int64_t in) {
    return {WeightFormat::kFp4, tensor(prefix + ".weight", DType::kI8, {out, in / 2}),
            tensor(prefix + ".scale", DType::kF8E8M0, {out, in / 32}), out, in};
  }
  LinearWeight linear(const std::string& prefix, WeightFormat f, int64_t out, int64_t in) {
    if (f == WeightFormat::kFp4) return fp4(prefix, out, in);
    if (f == WeightFormat::kBf16)
      return {WeightFormat::kBf16, tensor(prefix + ".weight", DType::kBF16, {out, in}), nullptr, out, in};
    return fp8(prefix, out, in);
  }
  // wo_a: FP8 with scales in the HF release, bf16 without scales after the reference's convert.py.
  LinearWeight wo_a(const std::string& prefix, int64_t out, int64_t in) {
    const TensorInfo* t = ckpt_ ? ckpt_->find(prefix + ".weight") : nullptr;
    if (t && t->dtype == DType::kBF16) return linear(prefix, WeightFormat::kBf16, out, in);
    return fp8(prefix, out, in);
  }
  HcWeights hc(const std::string& prefix, int64_t rows, int64_t scales) {
    return {f32(prefix + "_fn", {rows, cfg_.hc_dim()}), f32(prefix + "_base", {rows}), f32(prefix + "_scale", {scales}),
            rows};
  }

  void finish() {
    if (!ckpt_) return;
    check_codes();
    std::vector<std::string> unexpected;
    for (const auto& n : ckpt_->names()) {
      if (!expected_.count(n) && !(dropped_ && dropped_->count(n))) unexpected.push_back(n);
    }
    if (missing_.empty() && wrong_.empty() && unexpected.empty() && nan_.empty()) return;
    std::string msg = fmt::format("checkpoint {} does not match its config:", ckpt_->path().string());
    append(msg, "missing", missing_);
    append(msg, "wrong dtype or shape", wrong_);
    append(msg, "unexpected", unexpected);
    append(msg, "corrupt (NaN codes)", nan_);
    throw Error(msg);
  }

 private:
  static void append(std::string& msg, const char* what, const std::vector<std::string>& items) {
    if (items.empty()) return;
    constexpr size_t kShow = 12;
    msg += fmt::format("\n  {} {} tensor(s):", items.size(), what);
    for (size_t i = 0; i < std::min(items.size(), kShow); ++i) msg += "\n    " + items[i];
    if (items.size() > kShow) msg += fmt::format("\n    ... and {} more", items.size() - kShow);
  }

  // FP8 weights and scales hold no NaN codes in a real checkpoint (e4m3 0x7f/0xff, e8m0 0xff). They
  // are refused here, so that no backend sees one (the kernels would not agree on what it yields).
  // The tensors are scanned on several threads (the scan also pages a mapped checkpoint in), and
  // reported in binding order.
  struct Scan {
    std::string name;
    DType dtype;
    std::span<const uint8_t> bytes;
  };

  static std::string scan(const Scan& t) {
    const bool e4m3 = t.dtype == DType::kF8E4M3;
    const uint8_t mask = e4m3 ? 0x7f : 0xff;
    const auto is_nan = [mask](uint8_t b) { return (b & mask) == mask; };
    size_t count = 0;
    for (const uint8_t b : t.bytes) count += is_nan(b);  // vectorizes; the first is looked up only when needed
    if (count == 0) return {};
    const auto first = std::find_if(t.bytes.begin(), t.bytes.end(), is_nan) - t.bytes.begin();
    return fmt::format("{}: {} NaN {} code(s), the first at element {}", t.name, count, e4m3 ? "e4m3" : "e8m0", first);
  }

  void check_codes() {
    std::vector<std::string> found(scans_.size());
    std::atomic<size_t> next{0};
    const auto work = [&] {
      for (size_t i; (i = next.fetch_add(1)) < scans_.size();) found[i] = scan(scans_[i]);
    };
    const size_t threads = std::clamp<size_t>(std::thread::hardware_concurrency(), 1, 16);
    std::vector<std::jthread> pool;
    for (size_t i = 1; i < std::min(threads, scans_.size()); ++i) pool.emplace_back(work);
    work();
    pool.clear();  // joins
    for (auto& f : found) {
      if (!f.empty()) nan_.push_back(std::move(f));
    }
  }

  const Checkpoint* ckpt_;
  const ModelConfig& cfg_;
  std::vector<TensorSpec>* specs_;
  Locate locate_;
  const std::set<std::string>* dropped_;
  std::unordered_set<std::string> expected_;
  std::vector<Scan> scans_;
  std::vector<std::string> missing_, wrong_, nan_;
};

CompressorWeights bind_compressor(Binder& b, const std::string& p, const ModelConfig& c, int ratio, int64_t head_dim) {
  const int64_t width = (ratio == 4 ? 2 : 1) * head_dim;
  return {ratio,
          head_dim,
          b.bf16(p + ".wkv.weight", {width, c.dim}),
          b.bf16(p + ".wgate.weight", {width, c.dim}),
          b.f32(p + ".ape", {ratio, width}),
          b.norm(p + ".norm", head_dim)};
}

AttentionWeights bind_attention(Binder& b, const std::string& p, const ModelConfig& c, int ratio) {
  AttentionWeights a;
  const int64_t hd = int64_t{c.n_heads} * c.head_dim;
  a.wq_a = b.fp8(p + ".wq_a", c.q_lora_rank, c.dim);
  a.q_norm = b.norm(p + ".q_norm", c.q_lora_rank);
  a.wq_b = b.fp8(p + ".wq_b", hd, c.q_lora_rank);
  a.wkv = b.fp8(p + ".wkv", c.head_dim, c.dim);
  a.kv_norm = b.norm(p + ".kv_norm", c.head_dim);
  a.wo_a = b.wo_a(p + ".wo_a", int64_t{c.o_groups} * c.o_lora_rank, c.o_group_in());
  a.wo_b = b.fp8(p + ".wo_b", c.dim, int64_t{c.o_groups} * c.o_lora_rank);
  a.attn_sink = b.f32(p + ".attn_sink", {c.n_heads});
  if (ratio != 0) a.compressor = bind_compressor(b, p + ".compressor", c, ratio, c.head_dim);
  if (ratio == 4) {
    IndexerWeights ix;
    ix.wq_b = b.fp8(p + ".indexer.wq_b", int64_t{c.index_n_heads} * c.index_head_dim, c.q_lora_rank);
    ix.weights_proj = b.bf16(p + ".indexer.weights_proj.weight", {c.index_n_heads, c.dim});
    ix.compressor = bind_compressor(b, p + ".indexer.compressor", c, 4, c.index_head_dim);
    a.indexer = ix;
  }
  return a;
}

// tid2eid rows must name distinct experts below E (the reference's indexed add relies on it).
void check_tid2eid(const int64_t* t, const std::string& name, const ModelConfig& c) {
  if (!t) return;
  for (int64_t v = 0; v < c.vocab_size; ++v) {
    const int64_t* row = t + v * c.n_activated_experts;
    for (int k = 0; k < c.n_activated_experts; ++k) {
      DSV4_CHECK(row[k] >= 0 && row[k] < c.n_routed_experts, "{}: row {} names expert {} (experts are 0..{})", name, v,
                 row[k], c.n_routed_experts - 1);
      for (int j = 0; j < k; ++j) DSV4_CHECK(row[j] != row[k], "{}: row {} names expert {} twice", name, v, row[k]);
    }
  }
}

MoeWeights bind_moe(Binder& b, const std::string& p, const ModelConfig& c, bool hash) {
  MoeWeights m;
  m.gate_weight = b.bf16(p + ".gate.weight", {c.n_routed_experts, c.dim});
  if (hash) {
    m.tid2eid = reinterpret_cast<const int64_t*>(
        b.tensor(p + ".gate.tid2eid", DType::kI64, {c.vocab_size, c.n_activated_experts}));
  } else {
    m.gate_bias = b.f32(p + ".gate.bias", {c.n_routed_experts});
  }
  for (int e = 0; e < c.n_routed_experts; ++e) {
    const std::string q = fmt::format("{}.experts.{}", p, e);
    m.experts.push_back({b.linear(q + ".w1", c.expert_format, c.moe_inter_dim, c.dim),
                         b.linear(q + ".w2", c.expert_format, c.dim, c.moe_inter_dim),
                         b.linear(q + ".w3", c.expert_format, c.moe_inter_dim, c.dim)});
  }
  m.shared = {b.fp8(p + ".shared_experts.w1", c.moe_inter_dim, c.dim),
              b.fp8(p + ".shared_experts.w2", c.dim, c.moe_inter_dim),
              b.fp8(p + ".shared_experts.w3", c.moe_inter_dim, c.dim)};
  return m;
}

BlockWeights bind_block(Binder& b, const std::string& p, const ModelConfig& c, int layer, bool hash) {
  BlockWeights w;
  w.layer = layer;
  w.ratio = c.compress_ratio(layer);
  w.attn_norm = b.norm(p + ".attn_norm", c.dim);
  w.ffn_norm = b.norm(p + ".ffn_norm", c.dim);
  w.hc_attn = b.hc(p + ".hc_attn", c.hc_mix_dim(), 3);
  w.hc_ffn = b.hc(p + ".hc_ffn", c.hc_mix_dim(), 3);
  w.attn = bind_attention(b, p + ".attn", c, w.ratio);
  w.ffn = bind_moe(b, p + ".ffn", c, hash);
  return w;
}

}  // namespace

WeightFormat infer_expert_format(const Checkpoint& ckpt, const ModelConfig& cfg, std::optional<WeightFormat> declared) {
  const std::string name = "layers.0.ffn.experts.0.w1.weight";
  const TensorInfo* w = ckpt.find(name);
  DSV4_CHECK(w, "checkpoint {}: tensor {} is missing, so the expert format cannot be inferred", ckpt.path().string(),
             name);
  WeightFormat f;
  if ((w->dtype == DType::kI8 || w->dtype == DType::kU8) && w->shape == Shape{cfg.moe_inter_dim, cfg.dim / 2}) {
    f = WeightFormat::kFp4;
  } else if (w->dtype == DType::kF8E4M3 && w->shape == Shape{cfg.moe_inter_dim, cfg.dim}) {
    f = WeightFormat::kFp8;
  } else if (w->dtype == DType::kBF16 && w->shape == Shape{cfg.moe_inter_dim, cfg.dim}) {
    f = WeightFormat::kBf16;
  } else {
    fail("checkpoint {}: {} is {} {}; expected I8 [{}, {}] (FP4) or F8_E4M3 [{}, {}] (FP8)", ckpt.path().string(), name,
         dtype_name(w->dtype), w->shape, cfg.moe_inter_dim, cfg.dim / 2, cfg.moe_inter_dim, cfg.dim);
  }
  auto fmt_name = [](WeightFormat x) {
    return x == WeightFormat::kFp4 ? "fp4" : x == WeightFormat::kFp8 ? "fp8" : "bf16";
  };
  DSV4_CHECK(!declared || *declared == f,
             "checkpoint {}: inference/config.json says expert_dtype \"{}\" but {} holds {}", ckpt.path().string(),
             fmt_name(*declared), name, fmt_name(f));
  return f;
}

namespace {

ModelWeights bind_all(Binder& b, const ModelConfig& cfg) {
  ModelWeights m;
  m.embed = b.bf16("embed.weight", {cfg.vocab_size, cfg.dim});
  m.head = b.linear("head", WeightFormat::kBf16, cfg.vocab_size, cfg.dim);
  m.norm = b.norm("norm", cfg.dim);
  m.hc_head = b.hc("hc_head", cfg.hc_mult, 1);
  for (int i = 0; i < cfg.n_layers; ++i) {
    m.layers.push_back(bind_block(b, fmt::format("layers.{}", i), cfg, i, i < cfg.n_hash_layers));
  }
  for (int k = 0; k < cfg.n_mtp_layers; ++k) {
    const std::string p = fmt::format("mtp.{}", k);
    MtpWeights t;
    t.block = bind_block(b, p, cfg, cfg.n_layers + k, /*hash=*/false);
    t.e_proj = b.fp8(p + ".e_proj", cfg.dim, cfg.dim);
    t.h_proj = b.fp8(p + ".h_proj", cfg.dim, cfg.dim);
    t.enorm = b.norm(p + ".enorm", cfg.dim);
    t.hnorm = b.norm(p + ".hnorm", cfg.dim);
    t.norm = b.norm(p + ".norm", cfg.dim);
    t.hc_head = b.hc(p + ".hc_head", cfg.hc_mult, 1);
    m.mtp.push_back(std::move(t));
  }
  b.finish();
  if (!b.checks()) return m;
  for (const auto& l : m.layers) check_tid2eid(l.ffn.tid2eid, fmt::format("layers.{}.ffn.gate.tid2eid", l.layer), cfg);
  return m;
}

}  // namespace

ModelWeights bind_weights(const Checkpoint& ckpt, const ModelConfig& cfg, const std::set<std::string>& dropped) {
  Binder b(&ckpt, cfg, nullptr, {}, &dropped);
  return bind_all(b, cfg);
}

ModelWeights bind_weights(const ModelConfig& cfg, const std::function<const uint8_t*(const TensorSpec&)>& locate) {
  Binder b(nullptr, cfg, nullptr, locate);
  return bind_all(b, cfg);
}

uint64_t TensorSpec::nbytes() const {
  uint64_t n = dtype_size(dtype);
  for (const int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::vector<TensorSpec> checkpoint_tensor_specs(const ModelConfig& cfg) {
  std::vector<TensorSpec> specs;
  Binder b(nullptr, cfg, &specs);
  bind_all(b, cfg);
  return specs;
}

}  // namespace dsv4
