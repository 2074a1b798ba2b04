// OpProfile: an Ops that forwards every call to another backend and, while enabled, puts a device mark
// (a CUDA event on the GPU) before and after each op; disabling it waits once and adds each op's device
// time to a per-op total. Nothing waits in between, so the step runs as unprofiled and the totals sum
// to the device's busy time (`bench step --profile`); an op the device had to wait for the host to
// issue also carries that wait.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "backend/device.h"
#include "backend/ops.h"

namespace dsv4 {

struct OpTime {
  std::string op;
  int64_t calls = 0;
  double ms = 0;
};

class OpProfile final : public Ops {
 public:
  OpProfile(Ops& inner, Device& dev) : inner_(inner), dev_(dev) {}
  void enable(bool on);          // on: clears the totals; off: waits and adds up the recorded ops
  std::vector<OpTime> totals();  // waits for the ops recorded so far; largest total first

  void linear(const LinearParams& p) override {
    timed(linear_label(p), [&] { inner_.linear(p); });
  }
  void rms_norm(const RmsNormParams& p) override {
    timed("rms_norm", [&] { inner_.rms_norm(p); });
  }
  void head_rms_norm(const HeadRmsNormParams& p) override {
    timed("head_rms_norm", [&] { inner_.head_rms_norm(p); });
  }
  void rope(const RopeParams& p) override {
    timed("rope", [&] { inner_.rope(p); });
  }
  void hadamard(const HadamardParams& p) override {
    timed("hadamard", [&] { inner_.hadamard(p); });
  }
  void quant_sim(const QuantSimParams& p) override {
    timed("quant_sim", [&] { inner_.quant_sim(p); });
  }
  void store_entries(const StoreEntriesParams& p) override {
    timed("store_entries", [&] { inner_.store_entries(p); });
  }
  void kv_insert(const KvInsertParams& p) override {
    timed("kv_insert", [&] { inner_.kv_insert(p); });
  }
  void sparse_attention(const SparseAttentionParams& p) override {
    timed(p.compressed_width > 0 ? "sparse_attention" : "sparse_attention (window)",
          [&] { inner_.sparse_attention(p); });
  }
  void compressor_step(const CompressorStepParams& p) override {
    timed("compressor_step", [&] { inner_.compressor_step(p); });
  }
  void compressor_emit(const CompressorEmitParams& p) override {
    timed("compressor_emit", [&] { inner_.compressor_emit(p); });
  }
  void indexer_topk(const IndexerTopkParams& p) override {
    timed("indexer_topk", [&] { inner_.indexer_topk(p); });
  }
  void hc_pre(const HcPreParams& p) override {
    timed("hc_pre", [&] { inner_.hc_pre(p); });
  }
  void hc_post(const HcPostParams& p) override {
    timed("hc_post", [&] { inner_.hc_post(p); });
  }
  void hc_head(const HcHeadParams& p) override {
    timed("hc_head", [&] { inner_.hc_head(p); });
  }
  void moe_gate(const MoeGateParams& p) override {
    timed("moe_gate", [&] { inner_.moe_gate(p); });
  }
  void moe_experts(const MoeExpertsParams& p) override {
    timed("moe_experts", [&] { inner_.moe_experts(p); });
  }
  void shared_expert(const SharedExpertParams& p) override {
    timed("shared_expert", [&] { inner_.shared_expert(p); });
  }
  void embed(const EmbedParams& p) override {
    timed("embed", [&] { inner_.embed(p); });
  }
  void paged_slots(const PagedSlotsParams& p) override {
    timed("paged_slots", [&] { inner_.paged_slots(p); });
  }
  void argmax(const ArgmaxParams& p) override {
    timed("argmax", [&] { inner_.argmax(p); });
  }
  void sample(const SampleParams& p) override {
    timed("sample", [&] { inner_.sample(p); });
  }
  uint64_t scratch_epoch() const override { return inner_.scratch_epoch(); }

 private:
  void collect();  // waits for the recorded ops and adds their device times to the totals

  // "linear fp8 NxK" (xG for grouped): which GEMM shapes a step's linear time goes to.
  static std::string linear_label(const LinearParams& p);

  template <typename F>
  void timed(const std::string& op, F&& run) {
    if (!on_) return run();
    const size_t m0 = dev_.mark();
    run();
    spans_.push_back({op, m0, dev_.mark()});
  }

  struct Span {
    std::string op;
    size_t begin, end;  // device marks
  };

  Ops& inner_;
  Device& dev_;
  bool on_ = false;
  std::vector<Span> spans_;  // recorded, not yet read
  std::map<std::string, std::pair<int64_t, double>> totals_;
};

}  // namespace dsv4
