#include "model/placed_weights.h"

#include <functional>
#include <vector>

#include "core/error.h"
#include "model/weight_source.h"

namespace dsv4 {
namespace {

constexpr uint64_t kAlign = 256;

// Calls visit(pointer, bytes) for every main-stack tensor the forward reads on the device.
class TensorWalker {
 public:
  TensorWalker(const ModelConfig& cfg, std::function<void(const void*&, uint64_t)> visit)
      : c_(cfg), visit_(std::move(visit)) {}

  void model(ModelWeights& m) {
    const uint64_t V = static_cast<uint64_t>(c_.vocab_size), D = static_cast<uint64_t>(c_.dim);
    raw(m.embed, V * D * 2);
    linear(m.head);
    norm(m.norm);
    hc(m.hc_head, 1);
    for (auto& b : m.layers) block(b);
  }

 private:
  template <typename T>
  void raw(const T*& p, uint64_t bytes) {
    if (!p) return;
    const void* v = p;
    visit_(v, bytes);
    p = static_cast<const T*>(v);
  }
  void norm(NormWeight& n) { raw(n.weight, static_cast<uint64_t>(n.dim) * 2); }
  void hc(HcWeights& h, uint64_t scales) {
    const auto rows = static_cast<uint64_t>(h.rows);
    raw(h.fn, rows * static_cast<uint64_t>(c_.hc_dim()) * 4);
    raw(h.base, rows * 4);
    raw(h.scale, scales * 4);
  }
  void linear(LinearWeight& w) {
    const auto out = static_cast<uint64_t>(w.out), in = static_cast<uint64_t>(w.in);
    switch (w.format) {
      case WeightFormat::kFp8:
        raw(w.data, out * in);
        raw(w.scale, ((out + 127) / 128) * ((in + 127) / 128));
        return;
      case WeightFormat::kFp4:
        raw(w.data, out * in / 2);
        raw(w.scale, out * in / 32);
        return;
      case WeightFormat::kBf16:
        raw(w.data, out * in * 2);
        return;
    }
  }
  void compressor(CompressorWeights& cw) {
    const auto width = static_cast<uint64_t>((cw.ratio == 4 ? 2 : 1) * cw.head_dim), D = static_cast<uint64_t>(c_.dim);
    raw(cw.wkv, width * D * 2);
    raw(cw.wgate, width * D * 2);
    raw(cw.ape, static_cast<uint64_t>(cw.ratio) * width * 4);
    norm(cw.norm);
  }
  void block(BlockWeights& b) {
    const auto D = static_cast<uint64_t>(c_.dim), E = static_cast<uint64_t>(c_.n_routed_experts);
    norm(b.attn_norm);
    norm(b.ffn_norm);
    hc(b.hc_attn, 3);
    hc(b.hc_ffn, 3);
    AttentionWeights& a = b.attn;
    for (LinearWeight* w : {&a.wq_a, &a.wq_b, &a.wkv, &a.wo_b}) linear(*w);  // wo_a: the model uploads its bf16 form
    norm(a.q_norm);
    norm(a.kv_norm);
    raw(a.attn_sink, static_cast<uint64_t>(a.wq_b.out / c_.head_dim) * 4);
    if (a.compressor) compressor(*a.compressor);
    if (a.indexer) {
      linear(a.indexer->wq_b);
      raw(a.indexer->weights_proj, static_cast<uint64_t>(c_.index_n_heads) * D * 2);
      compressor(a.indexer->compressor);
    }
    raw(b.ffn.gate_weight, E * D * 2);
    raw(b.ffn.gate_bias, E * 4);  // tid2eid: the model converts it on the host
    for (auto& e : b.ffn.experts)
      for (LinearWeight* w : {&e.w1, &e.w2, &e.w3}) linear(*w);
    for (LinearWeight* w : {&b.ffn.shared.w1, &b.ffn.shared.w2, &b.ffn.shared.w3}) linear(*w);
  }

  const ModelConfig& c_;
  std::function<void(const void*&, uint64_t)> visit_;
};

// Bytes of the one device buffer the walked tensors go to.
uint64_t walked_bytes(const ModelWeights& w, const ModelConfig& cfg) {
  uint64_t total = 0;
  ModelWeights probe = w;
  TensorWalker(cfg, [&](const void*&, uint64_t bytes) {
    total += (bytes + kAlign - 1) / kAlign * kAlign;
  }).model(probe);
  return total;
}

}  // namespace

uint64_t PlacedWeights::bytes_needed(const ModelWeights& host, const ModelConfig& cfg) {
  uint64_t total = walked_bytes(host, cfg);
  // wo_a is uploaded by the model in bf16, and an FP8 checkpoint's also as its FP8 twin (model.cpp).
  for (const auto& b : host.layers) {
    const LinearWeight& w = b.attn.wo_a;
    const auto values = static_cast<uint64_t>(w.out * w.in);
    total += values * 2;
    if (w.format == WeightFormat::kFp8 && w.out % 128 == 0 && w.in % 128 == 0) total += values + values / (128 * 128);
  }
  return total;
}

namespace {

// The views the model reads on the host to prepare device copies of its own (wo_a's bf16 form, tid2eid).
std::vector<const void*> host_prepared_views(const ModelWeights& w) {
  std::vector<const void*> views;
  for (const auto& b : w.layers) {
    for (const void* v : {static_cast<const void*>(b.attn.wo_a.data), static_cast<const void*>(b.attn.wo_a.scale),
                          static_cast<const void*>(b.ffn.tid2eid)})
      if (v) views.push_back(v);
  }
  return views;
}

// Weights made on demand must fit where they go; refused before any is made.
void check_fits(const ModelWeights& host, const ModelConfig& cfg, const Device& dev) {
  const uint64_t need = PlacedWeights::bytes_needed(host, cfg), have = dev.memory_capacity();
  DSV4_CHECK(need <= have,
             "--load-format dummy: the weights need {} bytes ({:.1f} GiB) on the device, which has {} bytes ({:.1f} "
             "GiB); make the model smaller with --hf-overrides (num_hidden_layers, n_routed_experts, ...)",
             need, static_cast<double>(need) / (1 << 30), have, static_cast<double>(have) / (1 << 30));
}

}  // namespace

PlacedWeights::PlacedWeights(const ModelWeights& host, const ModelConfig& cfg, Device& dev) : placed_(host) {
  placed_.mtp.clear();  // the main stack only
  placed_.source = nullptr;
  WeightSource* source = host.source;
  if (source) check_fits(host, cfg, dev);
  if (dev.host_memory()) {
    // The views are where the ops read: a source makes every tensor the model reads and keeps it.
    if (source) {
      ModelWeights views = placed_;
      TensorWalker(cfg, [&](const void*& p, uint64_t) { source->acquire(p); }).model(views);
    }
  } else {
    place(cfg, dev, source);
  }
  if (source)
    for (const void* v : host_prepared_views(host)) source->acquire(v);
}

void PlacedWeights::place(const ModelConfig& cfg, Device& dev, WeightSource* source) {
  // Pass 1 lays the tensors out, pass 2 copies them and rebinds the views. Tensors made on demand are
  // made one at a time and released once their copy has landed (the host never holds the model).
  storage_ = DeviceArray<uint8_t>(dev, walked_bytes(placed_, cfg));
  uint64_t at = 0;
  TensorWalker(cfg, [&](const void*& p, uint64_t bytes) {
    uint8_t* dst = storage_.data() + at;
    if (source) source->acquire(p);
    dev.to_device(dst, p, bytes);
    if (source) {
      dev.synchronize();
      source->release(p);
    }
    p = dst;
    at += (bytes + kAlign - 1) / kAlign * kAlign;
  }).model(placed_);
  dev.synchronize();
}

}  // namespace dsv4
