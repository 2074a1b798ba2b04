// OpTrace: an Ops that forwards every call to another backend and keeps a host copy of what the
// call wrote to its dense outputs (table writes show up in the attention outputs that read them).
// Two traces of the same model run on two backends line up call by call, so compare_traces names
// the first op where they part, which block-level checks cannot (`dsv4 golden-check --compare-ops`).
// Every call synchronizes the device: a debugging tool, never on a serving path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/device.h"
#include "backend/ops.h"

namespace dsv4 {

enum class TraceElem : uint8_t { kBf16, kF32, kI32 };

struct OpRecord {
  std::string op;  // "linear", "moe_experts.y", ...
  TraceElem elem = TraceElem::kBf16;
  std::vector<uint8_t> bytes;
};

class OpTrace final : public Ops {
 public:
  OpTrace(Ops& inner, Device& dev) : inner_(inner), dev_(dev) {}
  const std::vector<OpRecord>& records() const { return records_; }

  void linear(const LinearParams& p) override;
  void rms_norm(const RmsNormParams& p) override;
  void head_rms_norm(const HeadRmsNormParams& p) override;
  void rope(const RopeParams& p) override;
  void hadamard(const HadamardParams& p) override;
  void quant_sim(const QuantSimParams& p) override;
  void store_entries(const StoreEntriesParams& p) override;
  void kv_insert(const KvInsertParams& p) override;
  void sparse_attention(const SparseAttentionParams& p) override;
  void compressor_step(const CompressorStepParams& p) override;
  void compressor_emit(const CompressorEmitParams& p) override;
  void indexer_topk(const IndexerTopkParams& p) override;
  void hc_pre(const HcPreParams& p) override;
  void hc_post(const HcPostParams& p) override;
  void hc_head(const HcHeadParams& p) override;
  void moe_gate(const MoeGateParams& p) override;
  void moe_experts(const MoeExpertsParams& p) override;
  void shared_expert(const SharedExpertParams& p) override;
  void embed(const EmbedParams& p) override;
  void paged_slots(const PagedSlotsParams& p) override;
  void argmax(const ArgmaxParams& p) override;
  void sample(const SampleParams& p) override;
  uint64_t scratch_epoch() const override { return inner_.scratch_epoch(); }

 private:
  // Copies rows x cols elements (row stride `stride` elements) of a device array into a record.
  void keep(std::string op, TraceElem e, const void* p, int64_t rows, int64_t cols, int64_t stride = 0);

  Ops& inner_;
  Device& dev_;
  std::vector<OpRecord> records_;
};

// One line per call whose outputs differ (at most max_lines), then one per op kind with its worst
// normalised difference; the first line names the first call where the traces part.
std::vector<std::string> compare_traces(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b,
                                        size_t max_lines = 40);

}  // namespace dsv4
