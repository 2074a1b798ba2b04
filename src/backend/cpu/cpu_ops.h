// CpuOps: the CPU backend of Ops. Plain C++ with fp32 accumulation and the reference's exact
// rounding and quantization points, threaded over a ThreadPool. Every output element is computed
// with one fixed order of operations, independent of batch composition and thread count, so results
// are batch-invariant and bit-reproducible run to run.
#pragma once

#include "backend/ops.h"
#include "core/thread_pool.h"

namespace dsv4 {

class CpuOps final : public Ops {
 public:
  // threads <= 0: one per hardware thread.
  explicit CpuOps(int threads = 0);

  int threads() const { return pool_.size(); }

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

 private:
  ThreadPool pool_;
};

}  // namespace dsv4
