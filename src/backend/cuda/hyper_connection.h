// Hyper-connection kernels (MODEL.md §4): pre with Sinkhorn, post, and the final head. Launchers take
// the op's parameters (backend/op_params.h, device pointers); arithmetic as in
// backend/cpu/hyper_connection.cpp.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/gemm/gemm_plan.h"
#include "backend/op_params.h"

namespace dsv4::cuda {

// Device floats of `scratch` that lets hc_pre / hc_head (mix = (2+hc)*hc resp. hc) take the few-token
// paths: the exact chain (the wide kernel's bits) or, fast, the column-split mix; 0 where the wide
// kernel serves (scratch may then be null).
int64_t hc_scratch_floats(int64_t tokens, int hc, int64_t dim, int mix, bool fast);

// The paths (GemmPolicy's hc_* values): decode's exact chain with its products made first by the whole
// CTA, so that the chain lane only adds (same bits; near the pace of its 16,384 dependent adds), or fed
// by a ring of product chunks (producer warps a chunk ahead, up to eight tokens a CTA; same bits;
// measured faster for a few tokens, docs/perf-history.md), which takes the chain calls (scratch,
// 16-byte aligned h and fn, width % 8 == 0) that the products-first path does not; out_norm in the
// finishing kernel (below) or apart.
int64_t hc_ring_launches();  // ring kernels launched so far (tests)
// Whether a call of `tokens` with scratch and 16-byte aligned h and fn takes the products-first path
// (width = hc*dim).
bool hc_uses_products(const GemmPolicy& policy, int64_t tokens, int mix, int64_t width);

// hc <= 8. The fast tier (policy.numerics, spec/NUMERICS.md): the mix's fp32 sums in a fixed order without the
// sequential chain (hc <= 4): over column chunks for a few tokens, on the bf16 tensor cores (fn in three
// exact bf16 planes) for more;
// otherwise the exact paths, the CPU's bits.
// scratch: hc_scratch_floats() device floats (may be null where that is 0). out_norm (hc_pre and
// hc_head): the paths with a finishing kernel apply rms_norm in it, a CTA a token (dim <= 7168), with
// the Sinkhorn on its own warp beside the columns; the others launch rms_norm after. rms_norm's bits.
void hc_pre(const HcPreParams& p, float* scratch, const GemmPolicy& policy, cudaStream_t stream);

// out may equal residual.
void hc_post(const HcPostParams& p, cudaStream_t stream);

// hc_post then hc_pre (HcPostPreParams). On the fast tier, for up to policy.hc_post_pre_max_tokens tokens
// (hc 4, dim % 8 == 0 and <= 7168, the sublayer's norm fused, 16-byte aligned h, x and norm), one kernel:
// each CTA writes its channels' new streams and their share of the mix, and a token's last CTA finishes
// its pre (the fast mix's bounds; post's bits). Elsewhere the two ops. scratch: hc_scratch_floats of the
// pre (the fused kernel's parts, a row per 256 channels, fit in the fast mix's); counters:
// hc_post_pre_max_tokens zeroed ints, kept zero between calls (each call leaves them so).
bool hc_post_pre_fuses(const HcPostPreParams& p, const GemmPolicy& policy);
void hc_post_pre(const HcPostPreParams& p, float* scratch, int32_t* counters, const GemmPolicy& policy,
                 cudaStream_t stream);

// hc_pre's kernels with the head's mix (fn [hc, hc·dim]); scratch and policy as there.
void hc_head(const HcHeadParams& p, float* scratch, const GemmPolicy& policy, cudaStream_t stream);

}  // namespace dsv4::cuda
