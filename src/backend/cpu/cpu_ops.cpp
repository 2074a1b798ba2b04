#include "backend/cpu/cpu_ops.h"

#include <vector>

#include "backend/cpu/attention.h"
#include "backend/cpu/compressor.h"
#include "backend/cpu/hyper_connection.h"
#include "backend/cpu/indexer.h"
#include "backend/cpu/linear.h"
#include "backend/cpu/moe.h"
#include "backend/cpu/norms.h"
#include "backend/cpu/rotary.h"
#include "backend/cpu/row_ops.h"
#include "backend/cpu/sampling.h"

namespace dsv4 {

CpuOps::CpuOps(int threads) : pool_(threads) {}

// Each op: the CPU kernel of the same name (the Ops front has checked p).
#define DSV4_CPU_OP(name, Params) \
  void CpuOps::do_##name(const Params& p) { cpu::name(pool_, p); }

DSV4_CPU_OP(linear, LinearParams)
DSV4_CPU_OP(rms_norm, RmsNormParams)
DSV4_CPU_OP(rope, RopeParams)
DSV4_CPU_OP(hadamard, HadamardParams)
DSV4_CPU_OP(quant_sim, QuantSimParams)
DSV4_CPU_OP(store_entries, StoreEntriesParams)
DSV4_CPU_OP(compressor_step, CompressorStepParams)
DSV4_CPU_OP(compressor_emit, CompressorEmitParams)
DSV4_CPU_OP(indexer_topk, IndexerTopkParams)
DSV4_CPU_OP(hc_pre, HcPreParams)
DSV4_CPU_OP(hc_post, HcPostParams)
void CpuOps::do_hc_post_pre(const HcPostPreParams& p) {  // the two parts in order: nothing to fuse on the CPU
  cpu::hc_post(pool_, p.post);
  cpu::hc_pre(pool_, p.pre);
}
DSV4_CPU_OP(hc_head, HcHeadParams)
DSV4_CPU_OP(moe_gate, MoeGateParams)
DSV4_CPU_OP(moe_experts, MoeExpertsParams)
DSV4_CPU_OP(moe_pairs, MoePairsParams)
DSV4_CPU_OP(moe_combine, MoeCombineParams)
DSV4_CPU_OP(shared_expert, SharedExpertParams)
DSV4_CPU_OP(swiglu, SwigluParams)
DSV4_CPU_OP(embed, EmbedParams)
DSV4_CPU_OP(gather_rows, GatherRowsParams)
DSV4_CPU_OP(paged_slots, PagedSlotsParams)
DSV4_CPU_OP(argmax, ArgmaxParams)
DSV4_CPU_OP(sample, SampleParams)

#undef DSV4_CPU_OP

void CpuOps::do_sparse_attention(const SparseAttentionParams& p) {
  SparseAttentionParams a = p;
  if (p.q_unnormed) {  // the Q-norm and RoPE first, in place
    do_head_rms_norm({p.q_unnormed, p.tokens, p.heads, p.head_dim, p.q_norm_eps, p.positions, p.rope});
    a.q = p.q_unnormed, a.q_unnormed = nullptr;
  }
  cpu::sparse_attention(pool_, a);
  if (p.positions) cpu::rope(pool_, {p.out, p.tokens, p.heads, p.head_dim, p.positions, p.rope, true});
}

void CpuOps::do_head_rms_norm(const HeadRmsNormParams& p) {
  cpu::head_rms_norm(pool_, p);
  if (p.positions) cpu::rope(pool_, {p.x, p.rows, p.heads, p.head_dim, p.positions, p.rope, false});
}

// The reference's four steps in turn, on a copy of x.
void CpuOps::do_kv_insert(const KvInsertParams& p) {
  const int64_t d = p.dims.dim;
  std::vector<uint16_t> kv(static_cast<size_t>(p.rows * d));
  cpu::rms_norm(pool_, {p.x, kv.data(), p.norm_weight, p.rows, d, p.eps});
  cpu::rope(pool_, {kv.data(), p.rows, 1, static_cast<int>(d), p.positions, p.rope, false});
  cpu::quant_sim(pool_, {kv.data(), p.rows, d - p.dims.rope_dim, d, QuantSim::kFp8, 64});
  cpu::store_entries(pool_, {kv.data(), p.rows, p.dims, p.table, p.slots});
}

}  // namespace dsv4
