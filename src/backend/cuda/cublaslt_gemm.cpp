// GemmRunner: runs each GEMM on the route its plan names (gemm/gemm_plan.h): cuBLASLt (FP8
// block-scaled, bf16), the fast tensor-core kernel (gemm/fast_mma.h) or the exact kernels (gemm.cu),
// with the scratch each needs. Row-major y = x·Wᵀ is column-major yᵀ = W·xᵀ, so cuBLASLt
// sees A = W (op T, lda = K), B = x (op N, ldb = x row stride), D = y (ldd = y row stride),
// m = N, n = rows, k = K: the "TN" form FP8 requires. Everything runs on the runner's stream;
// nothing waits on the host.
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <limits>
#include <map>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/fp4_gemv.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/gemm/fast_gemv.h"
#include "backend/cuda/gemm/fast_mma.h"
#include "backend/cuda/gemm/fast_plain_gemv.h"
#include "backend/cuda/gemm/fast_sgemm.h"
#include "backend/cuda/gemm/lt_experts.h"
#include "backend/cuda/gemm/wgmma_few.h"
#include "backend/cuda/gemm/wgmma_gemm.h"
#include "backend/cuda/gemm_imma.h"
#include "backend/cuda/gemm_imma_skinny.h"
#include "backend/cuda/gemm_internal.h"
#include "backend/cuda/scratch_epoch.h"
#include "core/error.h"

namespace dsv4::cuda {
namespace {

const char* lt_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "unknown cublasStatus_t";
}

#define DSV4_LT_CHECK(expr)                                                                                     \
  do {                                                                                                          \
    const cublasStatus_t dsv4_st_ = (expr);                                                                     \
    if (dsv4_st_ != CUBLAS_STATUS_SUCCESS)                                                                      \
      ::dsv4::fail("cuBLASLt error {} ({}) at {}:{}: {}", static_cast<int>(dsv4_st_), lt_status_name(dsv4_st_), \
                   __FILE__, __LINE__, #expr);                                                                  \
  } while (0)

constexpr size_t kWorkspaceBytes = static_cast<size_t>(kCublasLtWorkspaceBytes);

// Largest power of two (<= 256) dividing the address: the alignment cuBLASLt may assume.
uint32_t alignment_of(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  return a == 0 ? 256u : static_cast<uint32_t>(std::min<uintptr_t>(256, a & (~a + 1)));
}

// One cuBLASLt problem: y[n, m] (col-major yᵀ [m, n]) = Σ_k W[m, k]·x[n, k], optionally batched.
struct LtShape {
  bool fp8 = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldd = 0;
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_d = 0;
  bool d_f32 = false;
  uint32_t align_a = 0, align_b = 0, align_d = 0;

  std::array<int64_t, 15> key() const {
    return {fp8, m, n, k, lda, ldb, ldd, batch, stride_a, stride_b, stride_d, d_f32, align_a, align_b, align_d};
  }
};

// Descriptors and the chosen algorithm of one shape; ok = false when cuBLASLt offers none.
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;

  void destroy() {
    if (desc) cublasLtMatmulDescDestroy(desc);
    for (auto* l : {a, b, d}) {
      if (l) cublasLtMatrixLayoutDestroy(l);
    }
  }
};

template <typename T>
void set_desc(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  DSV4_LT_CHECK(cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof(v)));
}

cublasLtMatrixLayout_t make_layout(cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld, int64_t batch,
                                   int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  DSV4_LT_CHECK(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld));
  if (batch > 1) {
    const auto count = static_cast<int32_t>(batch);
    DSV4_LT_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    DSV4_LT_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return l;
}

// The heuristic refuses block scale modes without scale pointers, so the first call's are set here
// (each call sets its own before the matmul).
LtPlan make_plan(cublasLtHandle_t lt, const LtShape& s, const float* scale_a, const float* scale_b) {
  LtPlan p;
  // fp32 accumulation and scaling; bf16 inputs run as bf16 products (never TF32), FP8 without fast
  // accumulation (the default).
  DSV4_LT_CHECK(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
  set_desc(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
  if (s.fp8) {
    // The weight's 128x128 blocks on A, the activations' 1x128 blocks on B (gemm_internal.h layouts).
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F});
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, int32_t{CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F});
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scale_a);
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, scale_b);
  }
  const cudaDataType_t in = s.fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  p.a = make_layout(in, s.k, s.m, s.lda, s.batch, s.stride_a);
  p.b = make_layout(in, s.k, s.n, s.ldb, s.batch, s.stride_b);
  p.d = make_layout(s.d_f32 ? CUDA_R_32F : CUDA_R_16BF, s.m, s.n, s.ldd, s.batch, s.stride_d);

  cublasLtMatmulPreference_t pref = nullptr;
  DSV4_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  DSV4_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const std::array<std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t>, 4> aligns = {
      {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, s.align_a},
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, s.align_b},
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, s.align_d},
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, s.align_d}}};
  for (const auto& [attr, v] : aligns) {
    DSV4_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v)));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(lt, p.desc, p.a, p.b, p.d, p.d, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_NOT_SUPPORTED) DSV4_LT_CHECK(st);
  p.ok = st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS;
  if (p.ok) p.algo = result.algo;
  return p;
}

}  // namespace

struct GemmRunner::Impl {
  cudaStream_t stream;
  cublasLtHandle_t lt = nullptr;
  void* workspace = nullptr;
  void* act = nullptr;  // quantized activations: codes, then fp32 scales
  size_t act_bytes = 0;
  float* partial = nullptr;  // split-K partial sums (the exact SIMT kernels and the fast kernel)
  int64_t partial_floats = 0;
  int32_t* counters = nullptr;  // its per-tile arrival counters (zero between GEMMs)
  int64_t counter_count = 0;
  void* widened = nullptr;  // FP4 weights widened before a wgmma call (wgmma_widened_bytes)
  int64_t widened_bytes = 0;
  int32_t* error_flag = nullptr;  // the device's error word (device_error.h), where kernels report
  int32_t* span_flag = nullptr;   // lt_experts: set where a block cannot be re-encoded exactly
  int32_t* host_words = nullptr;  // lt_experts, pinned: a call's offsets, then the span flag
  int64_t host_word_count = 0;
  // Calls so far (run, run_pair, grouped: GemmRunner's), and the call whose offsets host_words holds.
  int64_t calls = 0, counted_call = -1;
  const int32_t* counted_offsets = nullptr;
  int counted_experts = 0;
  // lt_experts: streams beside `stream` for the experts' matmuls (GemmPolicy::lt_expert_streams), each
  // with a workspace of the same size (so the same plans, algorithms and bits) and an event to join.
  struct Lane {
    cudaStream_t stream = nullptr;
    void* workspace = nullptr;
    cudaEvent_t done = nullptr;
  };
  std::vector<Lane> lanes;
  cudaEvent_t forked = nullptr;
  // lt_experts: the stream that re-encodes a pass ahead of the matmuls,
  // the event of the call's start it waits on, and a buffer's re-encoding done / matmuls done.
  cudaStream_t ahead = nullptr;
  cudaEvent_t begun = nullptr, widened_at[2] = {}, used_at[2] = {};
  std::map<std::array<int64_t, 15>, LtPlan> plans;
  // lt_experts with GemmPolicy::lt_experts_resident: each weight list's (and its pair's) experts
  // re-encoded once, every one, in lt_expert_widen's slots; kept for the runner's life.
  std::map<std::pair<const void* const*, const void* const*>, std::pair<uint8_t*, int64_t>> residents;
  int64_t kept_bytes = 0, kept_budget = std::numeric_limits<int64_t>::max();  // set_kept_budget
  GemmPolicy policy;
  DeviceCaps caps;
  GemmRunner::Stats stats;

  Impl(cudaStream_t s, const GemmPolicy& p, int32_t* err) : stream(s), error_flag(err), policy(p), caps{sm_count()} {
    DSV4_LT_CHECK(cublasLtCreate(&lt));
    DSV4_CUDA_CHECK(cudaMallocAsync(&workspace, kWorkspaceBytes, stream));
  }

  ~Impl() {
    for (auto& [key, plan] : plans) plan.destroy();
    for (Lane& l : lanes) {  // their work was joined into `stream` (lt_experts), so frees there are ordered
      if (l.workspace) cudaFreeAsync(l.workspace, stream);
      if (l.done) cudaEventDestroy(l.done);
      if (l.stream) cudaStreamDestroy(l.stream);
    }
    if (forked) cudaEventDestroy(forked);
    for (cudaEvent_t e : {begun, widened_at[0], widened_at[1], used_at[0], used_at[1]})
      if (e) cudaEventDestroy(e);
    if (ahead) cudaStreamDestroy(ahead);  // its work was waited for by `stream` (lt_experts)
    if (act) cudaFreeAsync(act, stream);
    if (partial) cudaFreeAsync(partial, stream);
    if (counters) cudaFreeAsync(counters, stream);
    if (widened) cudaFreeAsync(widened, stream);
    if (span_flag) cudaFreeAsync(span_flag, stream);
    for (auto& [key, kept] : residents) cudaFreeAsync(kept.first, stream);
    if (host_words) cudaFreeHost(host_words);
    if (workspace) cudaFreeAsync(workspace, stream);
    if (lt) cublasLtDestroy(lt);
  }

  // Grow-only activation scratch; stream-ordered, so earlier work on the stream still sees the old one.
  void* act_scratch(size_t bytes) {
    if (bytes > act_bytes) {
      scratch_moves(stream, "the GEMM activation scratch");
      if (act) DSV4_CUDA_CHECK(cudaFreeAsync(act, stream));
      act = nullptr;
      act_bytes = std::max(bytes, act_bytes + act_bytes / 2);
      DSV4_CUDA_CHECK(cudaMallocAsync(&act, act_bytes, stream));
    }
    return act;
  }

  // Grow-only scratch for widened FP4 weights.
  void* widen_scratch(int64_t bytes) {
    if (bytes > widened_bytes) {
      scratch_moves(stream, "the widened FP4 weights");
      if (widened) DSV4_CUDA_CHECK(cudaFreeAsync(widened, stream));
      widened = nullptr;
      widened_bytes = bytes;
      DSV4_CUDA_CHECK(cudaMallocAsync(&widened, static_cast<size_t>(bytes), stream));
    }
    return widened;
  }

  // Grow-only split-K scratch: partial sums and per-tile arrival counters (new counters start zeroed;
  // the kernels leave them zeroed). The exact SIMT kernels and the fast kernel take turns on the
  // runner's stream, so they share it.
  void split_scratch(int64_t floats, int64_t count) {
    if (floats > partial_floats) {
      scratch_moves(stream, "the GEMM split-K scratch");
      if (partial) DSV4_CUDA_CHECK(cudaFreeAsync(partial, stream));
      partial = nullptr;
      partial_floats = std::max(floats, partial_floats + partial_floats / 2);
      DSV4_CUDA_CHECK(
          cudaMallocAsync(reinterpret_cast<void**>(&partial), static_cast<size_t>(partial_floats) * 4, stream));
    }
    if (count > counter_count) {
      scratch_moves(stream, "the GEMM split-K counters");
      if (counters) DSV4_CUDA_CHECK(cudaFreeAsync(counters, stream));
      counters = nullptr;
      counter_count = std::max(count, counter_count * 2);
      const size_t bytes = static_cast<size_t>(counter_count) * sizeof(int32_t);
      DSV4_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&counters), bytes, stream));
      DSV4_CUDA_CHECK(cudaMemsetAsync(counters, 0, bytes, stream));
    }
  }

  // The exact block kernel's split scratch, where its route splits.
  void split_scratch(ExactBlockArgs& p) {
    const SplitNeed need = exact_block_split_need(p, policy);
    if (need.floats == 0) return;
    split_scratch(need.floats, need.counters);
    p.partial = partial, p.partial_floats = partial_floats;
    p.counters = counters, p.counter_count = counter_count;
  }

  // The fast tier's kernels on codes: the swapped wgmma kernel for a decode batch of a dense FP8 weight,
  // wgmma for many rows a weight (each where it takes the call), else the few-row or mma.sync kernel on
  // its own plan.
  void fast_mma(const ExactBlockArgs& p, GemmPlan plan) {
    if (plan.route == GemmRoute::kWgmmaFew) {
      if (wgmma_few_takes(p)) {
        wgmma_few_gemm(p, plan.few_splits, stream);
        return;
      }
      plan.route = plan.fallback;  // the few-row or mma.sync plan, kept whole
    }
    if (plan.route == GemmRoute::kFastGemv && fast_gemv_takes(p)) {
      fast_gemv(p, {plan.gemv_k_parts, plan.gemv_items}, stream);
      return;
    }
    if (plan.fallback == GemmRoute::kWgmma) {
      if (wgmma_takes(p) && plan.widen_experts > 0 && p.kind == GemmWeightKind::kFp4) {
        const int64_t bytes = wgmma_widened_bytes(p, plan.widen_experts);
        wgmma_gemm_widened(p, plan.widen_experts, widen_scratch(bytes), error_flag, stream);
        return;
      }
      if (wgmma_takes(p)) {
        wgmma_gemm(p, error_flag, stream);
        return;
      }
      const GemmProblem prob{p.kind, p.rows, p.experts, p.n, p.kg, p.groups, p.y_b != nullptr};
      plan = plan_fast_mma(prob, policy, caps);
    }
    split_scratch(plan.workspace_floats, plan.workspace_counters);
    fast_mma_gemm(p, {plan.tile_rows, plan.splits, plan.resident}, partial, counters, stream);
  }

  const LtPlan& plan(const LtShape& s, const float* scale_a, const float* scale_b) {
    auto it = plans.find(s.key());
    if (it == plans.end()) it = plans.emplace(s.key(), make_plan(lt, s, scale_a, scale_b)).first;
    return it->second;
  }

  // One cuBLASLt matmul; false (nothing enqueued) when cuBLASLt does not take the shape.
  bool matmul(const LtShape& s, const void* a, const void* b, void* d, const float* scale_a, const float* scale_b) {
    const LtPlan& p = plan(s, scale_a, scale_b);
    if (!p.ok) return false;
    if (s.fp8) {
      set_desc(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scale_a);
      set_desc(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, scale_b);
    }
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t st = cublasLtMatmul(lt, p.desc, &alpha, a, p.a, b, p.b, &beta, d, p.d, d, p.d, &p.algo,
                                             workspace, kWorkspaceBytes, stream);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) {
      plans[s.key()].ok = false;
      return false;
    }
    DSV4_LT_CHECK(st);
    return true;
  }

  // One FP8 matmul of s.n rows under the plan of s.n rounded up to 128 (each expert's row count differs
  // from call to call: one heuristic query a bucket, not one a count); false (nothing enqueued) where
  // cuBLASLt refuses.
  bool matmul_rows(const LtShape& s, const void* a, const void* b, void* d, const float* scale_a, const float* scale_b,
                   cudaStream_t st, void* ws) {
    LtShape bucket = s;
    bucket.n = ceil_div(s.n, 128) * 128;
    const LtPlan& p = plan(bucket, scale_a, scale_b);
    if (!p.ok) return false;
    struct Layouts {
      cublasLtMatrixLayout_t b, d;
      ~Layouts() {
        cublasLtMatrixLayoutDestroy(b);
        cublasLtMatrixLayoutDestroy(d);
      }
    } l{make_layout(CUDA_R_8F_E4M3, s.k, s.n, s.ldb, 1, 0), make_layout(CUDA_R_16BF, s.m, s.n, s.ldd, 1, 0)};
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, scale_a);
    set_desc(p.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, scale_b);
    const float alpha = 1.0f, beta = 0.0f;
    const cublasStatus_t status =
        cublasLtMatmul(lt, p.desc, &alpha, a, p.a, b, l.b, &beta, d, l.d, d, l.d, &p.algo, ws, kWorkspaceBytes, st);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) return false;
    DSV4_LT_CHECK(status);
    return true;
  }

  // The lanes beside `stream` (lt_expert_streams - 1 of them), made at first use.
  void make_lanes() {
    const int want = std::max(1, policy.lt_expert_streams) - 1;
    if (static_cast<int>(lanes.size()) >= want) return;
    if (!forked) DSV4_CUDA_CHECK(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming));
    while (static_cast<int>(lanes.size()) < want) {
      Lane& l = lanes.emplace_back();
      DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&l.stream, cudaStreamNonBlocking));
      DSV4_CUDA_CHECK(cudaEventCreateWithFlags(&l.done, cudaEventDisableTiming));
      DSV4_CUDA_CHECK(cudaMallocAsync(&l.workspace, kWorkspaceBytes, stream));
    }
  }
  // The re-encoding stream and its events, made at first use.
  void make_ahead() {
    if (ahead) return;
    DSV4_CUDA_CHECK(cudaStreamCreateWithFlags(&ahead, cudaStreamNonBlocking));
    for (cudaEvent_t* e : {&begun, &widened_at[0], &widened_at[1], &used_at[0], &used_at[1]})
      DSV4_CUDA_CHECK(cudaEventCreateWithFlags(e, cudaEventDisableTiming));
  }
  // `to` waits for the work issued to `from` so far.
  static void wait_for(cudaStream_t to, cudaStream_t from, cudaEvent_t e) {
    DSV4_CUDA_CHECK(cudaEventRecord(e, from));
    DSV4_CUDA_CHECK(cudaStreamWaitEvent(to, e));
  }

  // The lanes start after `stream`'s work so far (fork) and `stream` continues after theirs (join).
  void fork_lanes() {
    if (lanes.empty()) return;
    DSV4_CUDA_CHECK(cudaEventRecord(forked, stream));
    for (Lane& l : lanes) DSV4_CUDA_CHECK(cudaStreamWaitEvent(l.stream, forked));
  }
  void join_lanes() {
    for (Lane& l : lanes) {
      DSV4_CUDA_CHECK(cudaEventRecord(l.done, l.stream));
      DSV4_CUDA_CHECK(cudaStreamWaitEvent(stream, l.done));
    }
  }

  // The experts' row counts on the host (host_words), and whether every expert with rows re-encodes
  // exactly: the stream's work so far waited for (a grouped call's offsets are made on the device), the
  // check skipped where the caller made it (checked). Nothing read where the previous call counted the
  // same offsets (same_offsets: the caller says they hold what they held) and nothing is to be checked.
  bool lt_expert_counts(const ExactBlockArgs& p, bool checked, bool same_offsets) {
    const bool held = checked && same_offsets && counted_call == calls - 1 && counted_offsets == p.offsets &&
                      counted_experts == p.experts;
    if (!held) {
      if (host_word_count < p.experts + 2) {
        if (host_words) DSV4_CUDA_CHECK(cudaFreeHost(host_words));
        host_word_count = p.experts + 2;
        DSV4_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_words), host_word_count * sizeof(int32_t)));
      }
      if (!checked) span_check(p, false);
      const size_t offset_bytes = static_cast<size_t>(p.experts + 1) * sizeof(int32_t);
      DSV4_CUDA_CHECK(cudaMemcpyAsync(host_words, p.offsets, offset_bytes, cudaMemcpyDeviceToHost, stream));
      if (!checked) {
        DSV4_CUDA_CHECK(
            cudaMemcpyAsync(host_words + p.experts + 1, span_flag, sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
      }
      DSV4_CUDA_CHECK(cudaStreamSynchronize(stream));
      ++stats.lt_count_reads;
    }
    counted_call = calls, counted_offsets = p.offsets, counted_experts = p.experts;
    return checked || host_words[p.experts + 1] == 0;
  }

  // span_flag cleared, then set by the check of p's experts with rows (all of them with all_experts).
  void span_check(const ExactBlockArgs& p, bool all_experts) {
    if (!span_flag) DSV4_CUDA_CHECK(cudaMallocAsync(reinterpret_cast<void**>(&span_flag), sizeof(int32_t), stream));
    DSV4_CUDA_CHECK(cudaMemsetAsync(span_flag, 0, sizeof(int32_t), stream));
    lt_expert_span_check(p, span_flag, stream, all_experts);
  }

  std::optional<bool> fp4_experts_reencode_exactly(const GroupedGemmArgs& a) {
    DSV4_CHECK(a.kind == GemmWeightKind::kFp4 && a.experts > 0 && a.offsets && a.w_data && a.w_scale,
               "fp4_experts_reencode_exactly: a grouped FP4 call's weights");
    if (a.n % 128 != 0 || a.k % 128 != 0) return false;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    DSV4_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone) return std::nullopt;
    ExactBlockArgs p = grouped_block_args(a);
    span_check(p, true);
    int32_t flag = 0;
    DSV4_CUDA_CHECK(cudaMemcpyAsync(&flag, span_flag, sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
    DSV4_CUDA_CHECK(cudaStreamSynchronize(stream));
    return flag == 0;
  }

  // A grouped FP4 call as one cuBLASLt matmul an expert (lt_experts.h); false: the caller runs the wgmma
  // kernel over every expert (rows this route wrote are written again). The matmuls of a pass of widened
  // experts spread over `stream` and the lanes (lt_expert_streams - 1), an expert on one of them (a pair
  // side by side, y_b = y + n: both weights, widened next to each other, in one matmul of 2n columns; else
  // a matmul a weight), each expert of 4 rows or more writing only its own rows (gemm_plan.h
  // lt_expert_pieces); experts of 1-3 rows spill and go first, on `stream` in ascending order, before the
  // lanes fork.
  bool lt_experts(const ExactBlockArgs& p, const GemmPlan& plan, const GroupedGemmArgs& a) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    DSV4_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone || a.row_slack < 3 || p.codes_ld % 16 != 0) return false;
    make_ahead();
    if (uint8_t* kept = resident_for(p, a.reencode_checked)) return lt_kept(p, plan, a, kept);
    const int halves = has_pair(p) ? 2 : 1, per_pass = std::max(1, plan.lt_pass_experts);
    const int64_t slots = int64_t{halves} * per_pass, buffer_bytes = cuda::widened_bytes(slots, p.n, p.kg);
    // Each pass re-encoded into one of two buffers on `ahead`, then multiplied on `stream` and the lanes:
    // the first pass's re-encoding runs while the counts come to the host, each next one's while the pass
    // before it multiplies (1-4% faster than re-encoding on `stream` between the passes: docs/perf.md).
    constexpr int buffers = 2;
    auto* scratch = static_cast<uint8_t*>(widen_scratch(buffers * buffer_bytes));
    const auto widen = [&](int first, int buffer, cudaStream_t st) {
      uint8_t* wide = scratch + buffer * buffer_bytes;
      const int count = std::min(per_pass, p.experts - first);
      lt_expert_widen(p, first, count, wide, reinterpret_cast<float*>(wide + slots * p.n * p.kg), st);
    };
    wait_for(ahead, stream, begun);  // after the routing (and the last call's matmuls)
    widen(0, 0, ahead);
    const bool counted = lt_expert_counts(p, a.reencode_checked, a.same_offsets);
    std::vector<int> passes;  // the first expert of each pass with rows
    for (int first = 0; counted && first < p.experts; first += per_pass) {
      if (host_words[std::min(p.experts, first + per_pass)] != host_words[first]) passes.push_back(first);
    }
    const bool ok = counted && lt_passes(p, plan, passes, scratch, buffer_bytes, widen);
    // Nothing on `ahead` outlives the call unseen (a refused call or a failed matmul leaves re-encoding
    // there; the caller's fallback may widen into the same scratch).
    wait_for(stream, ahead, begun);
    return ok;
  }

  // The weights of p's experts (every one) and its pair's re-encoded once and kept, where the policy asks,
  // the caller checked that all of them re-encode exactly and the kept budget has room; null: re-encode a
  // pass at a time (no room left in GPU memory included).
  uint8_t* resident_for(const ExactBlockArgs& p, bool checked) {
    if (!policy.lt_experts_resident || !checked) return nullptr;
    const auto key = std::make_pair(p.w_list, p.w_list_b);
    if (const auto it = residents.find(key); it != residents.end()) return it->second.first;
    const int64_t slots = int64_t{has_pair(p) ? 2 : 1} * p.experts, bytes = cuda::widened_bytes(slots, p.n, p.kg);
    if (bytes > kept_budget - kept_bytes) return nullptr;
    void* codes = nullptr;
    if (cudaMallocAsync(&codes, static_cast<size_t>(bytes), stream) != cudaSuccess) {
      (void)cudaGetLastError();
      return nullptr;
    }
    auto* wide = static_cast<uint8_t*>(codes);
    lt_expert_widen(p, 0, p.experts, wide, reinterpret_cast<float*>(wide + slots * p.n * p.kg), stream, true);
    ++stats.lt_resident_weights;
    kept_bytes += bytes;
    return residents.emplace(key, std::make_pair(wide, bytes)).first->second.first;
  }

  // Whether lists of grouped FP4 weights are kept re-encoded, or would be at their next call on cuBLASLt's
  // route: resident_for's key (w_list, w_list_b) and bytes (both weights where `pair`), its policy and budget.
  bool keeps(const void* const* w_list, const void* const* w_list_b, bool pair, int64_t n, int64_t k,
             int experts) const {
    if (!policy.lt_experts_resident) return false;
    if (residents.count({w_list, w_list_b}) != 0) return true;
    return cuda::widened_bytes(int64_t{pair ? 2 : 1} * experts, n, k) <= kept_budget - kept_bytes;
  }

  void forget_kept_experts(const void* const* w_list) {
    for (auto it = residents.begin(); it != residents.end();) {
      if (it->first.first != w_list && it->first.second != w_list) {
        ++it;
        continue;
      }
      DSV4_CUDA_CHECK(cudaFreeAsync(it->second.first, stream));  // after the calls that read it
      kept_bytes -= it->second.second;
      it = residents.erase(it);
    }
  }

  // lt_experts from weights kept re-encoded (resident_for): one pass over every expert, nothing re-encoded.
  bool lt_kept(const ExactBlockArgs& p, const GemmPlan& plan, const GroupedGemmArgs& a, uint8_t* kept) {
    GemmPlan all = plan;
    all.lt_pass_experts = p.experts;
    return lt_expert_counts(p, true, a.same_offsets) && lt_passes(p, all, {0}, kept, 0, [](int, int, cudaStream_t) {});
  }

  // lt_experts' passes, their experts' row counts on the host (host_words).
  template <typename Widen>
  bool lt_passes(const ExactBlockArgs& p, const GemmPlan& plan, const std::vector<int>& passes, uint8_t* scratch,
                 int64_t buffer_bytes, const Widen& widen) {
    make_lanes();
    const int32_t* off = host_words;
    const int64_t kblocks = p.kg / 128;
    auto* x_scales =
        static_cast<float*>(act_scratch(static_cast<size_t>(lt_expert_scale_floats(kblocks, p.rows, p.experts)) * 4));
    lt_expert_regroup_scales(p, x_scales, stream);
    const int halves = has_pair(p) ? 2 : 1, per_pass = std::max(1, plan.lt_pass_experts);
    const bool joint = halves == 2 && static_cast<uint16_t*>(p.y_b) == static_cast<uint16_t*>(p.y) + p.n;
    const int64_t slots = int64_t{halves} * per_pass;
    const int matmuls = joint ? 1 : halves;  // an expert's
    const int count_passes = static_cast<int>(passes.size());
    if (count_passes > 0 && passes[0] != 0) widen(passes[0], 0, ahead);  // experts 0.. had none
    bool ok = true;
    for (int k = 0; ok && k < count_passes; ++k) {
      const int first = passes[static_cast<size_t>(k)], count = std::min(per_pass, p.experts - first);
      DSV4_CUDA_CHECK(cudaEventRecord(widened_at[k % 2], ahead));
      if (k + 1 < count_passes) {  // the next pass, into the buffer pass k - 1 used
        if (k >= 1) DSV4_CUDA_CHECK(cudaStreamWaitEvent(ahead, used_at[(k + 1) % 2]));
        widen(passes[static_cast<size_t>(k) + 1], (k + 1) % 2, ahead);
      }
      DSV4_CUDA_CHECK(cudaStreamWaitEvent(stream, widened_at[k % 2]));
      const uint8_t* wide = scratch + (k % 2) * buffer_bytes;
      const float* wide_scales = reinterpret_cast<const float*>(wide + slots * p.n * p.kg);
      const auto expert = [&](int e, int h, cudaStream_t st, void* ws) {
        return lt_expert_matmul(p, joint, halves, off, x_scales, wide, wide_scales, first, e, h, st, ws);
      };
      const auto spills = [&](int e) { return off[e + 1] - off[e] < 4; };
      for (int e = first; ok && e < first + count; ++e) {  // the spilling experts, in order, on `stream`
        if (off[e + 1] == off[e] || !spills(e)) continue;
        for (int h = 0; ok && h < matmuls; ++h) ok = expert(e, h, stream, workspace);
      }
      fork_lanes();
      int issued = 0;
      for (int e = first; ok && e < first + count; ++e) {
        if (off[e + 1] == off[e] || spills(e)) continue;
        for (int h = 0; ok && h < matmuls; ++h) {
          const size_t lane = static_cast<size_t>(issued++) % (lanes.size() + 1);  // 0: `stream` itself
          const Lane on = lane == 0 ? Lane{stream, workspace, nullptr} : lanes[lane - 1];
          ok = expert(e, h, on.stream, on.workspace);
        }
      }
      join_lanes();  // before this buffer is re-encoded into again, and the caller goes on
      DSV4_CUDA_CHECK(cudaEventRecord(used_at[k % 2], stream));
    }
    return ok;
  }

  // Expert e's half h of the pass starting at `first` (both halves where joint) from the pass's
  // re-encoded weights, its pieces in order on st.
  bool lt_expert_matmul(const ExactBlockArgs& p, bool joint, int halves, const int32_t* off, const float* x_scales,
                        const uint8_t* wide, const float* wide_scales, int first, int e, int h, cudaStream_t st,
                        void* ws) {
    const int64_t kblocks = p.kg / 128, wide_scale_floats = p.n / 128 * weight_scale_ld(p.kg);
    const int64_t slot = int64_t{e - first} * halves + h;  // lt_expert_widen's slot of (e, h)
    const void* w = wide + slot * p.n * p.kg;
    const float* sa = wide_scales + slot * wide_scale_floats;
    const LtPieces pieces = lt_expert_pieces(off[e + 1] - off[e], kblocks);
    for (int i = 0; i < pieces.count; ++i) {
      const LtPiece& piece = pieces.piece[i];
      LtShape s;
      s.fp8 = true;
      s.m = joint ? 2 * p.n : p.n, s.n = piece.rows, s.k = p.kg;
      s.lda = p.kg, s.ldb = p.codes_ld, s.ldd = p.y_ld;
      const int64_t row = off[e] + piece.first;
      const uint8_t* x = p.codes + row * p.codes_ld;
      void* y = static_cast<uint16_t*>(h ? p.y_b : p.y) + row * p.y_ld;
      s.align_a = alignment_of(w), s.align_b = alignment_of(x), s.align_d = alignment_of(y);
      const float* xs = x_scales + lt_expert_scale_base(kblocks, off[e], e) + piece.scale_offset;
      if (!matmul_rows(s, w, x, y, sa, xs, st, ws)) return false;
    }
    return true;
  }

  // FP8 block-scaled through cuBLASLt, one matmul per group (each has its own scale offsets).
  bool lt_fp8(const GemmArgs& a, const uint8_t* codes, const float* act_scales, int64_t scale_ld, int64_t y_ld,
              const float* wscale) {
    const GemmWeight& w = a.w;
    const int64_t ng = w.rows / a.groups, kg = w.cols, k = kg * a.groups;
    if (a.groups > 1 && ng % 128 != 0) return false;  // group g's weight scales start at row block g·ng/128
    if (kg % 16 != 0 || alignment_of(w.data) < 16) return false;
    const size_t esz = a.out == GemmOut::kF32 ? 4 : 2;
    for (int g = 0; g < a.groups; ++g) {
      const auto* wg = static_cast<const uint8_t*>(w.data) + g * ng * kg;
      const uint8_t* xg = codes + g * kg;
      void* yg = static_cast<uint8_t*>(a.y) + static_cast<size_t>(g * ng) * esz;
      LtShape s;
      s.fp8 = true;
      s.m = ng, s.n = a.rows, s.k = kg;
      s.lda = kg, s.ldb = k, s.ldd = y_ld;
      s.d_f32 = a.out == GemmOut::kF32;
      s.align_a = alignment_of(wg), s.align_b = alignment_of(xg), s.align_d = alignment_of(yg);
      const float* sa = wscale + (g * ng / 128) * weight_scale_ld(kg);
      const float* sb = act_scales + (g * kg / 128) * scale_ld;
      if (!matmul(s, wg, xg, yg, sa, sb)) return false;  // the exact kernel then redoes every group
    }
    return true;
  }

  // bf16 weight and activations, fp32 accumulation; groups as a strided batch.
  bool lt_bf16(const GemmArgs& a, int64_t x_ld, int64_t y_ld) {
    const GemmWeight& w = a.w;
    const int64_t ng = w.rows / a.groups, kg = w.cols;
    LtShape s;
    s.m = ng, s.n = a.rows, s.k = kg;
    s.lda = kg, s.ldb = x_ld, s.ldd = y_ld;
    s.batch = a.groups, s.stride_a = ng * kg, s.stride_b = kg, s.stride_d = ng;
    s.d_f32 = a.out == GemmOut::kF32;
    s.align_a = alignment_of(w.data), s.align_b = alignment_of(a.x), s.align_d = alignment_of(a.y);
    return matmul(s, w.data, a.x, a.y, nullptr, nullptr);
  }

  static ExactPlainArgs plain_args(const GemmArgs& a, int64_t min_wide_tiles) {
    const GemmWeight& w = a.w;
    ExactPlainArgs p;
    p.x = a.x, p.x_ld = a.x_stride ? a.x_stride : w.cols * a.groups, p.rows = a.rows;
    p.n = w.rows, p.ng = w.rows / a.groups, p.kg = w.cols, p.groups = a.groups;
    p.w = w.data, p.w_f32 = w.kind == GemmWeightKind::kF32;
    p.w_fp8 = w.fp8_twin, p.w_fp8_scale = w.fp8_twin_scale;
    p.y = a.y, p.y_ld = a.y_stride ? a.y_stride : w.rows, p.y_f32 = a.out == GemmOut::kF32;
    p.min_wide_tiles = min_wide_tiles;
    return p;
  }

  static ExactBlockArgs block_args(const GemmArgs& a, int64_t y_ld) {
    const GemmWeight& w = a.w;
    ExactBlockArgs p;
    p.kind = w.kind;
    p.rows = a.rows, p.n = w.rows, p.ng = w.rows / a.groups, p.kg = w.cols, p.groups = a.groups;
    p.w = w.data, p.w_scale = w.scale;
    p.y = a.y, p.y_ld = y_ld, p.y_f32 = a.out == GemmOut::kF32;
    return p;
  }

  // A block-scaled pair on the few-row kernel in one launch, from bf16 rows; false: not taken.
  bool gemv_pair(const GemmArgs& a, const GemmWeight& w_b, void* y_b) {
    if (!a.w.scale || !w_b.scale || a.w.cols % 128 != 0) return false;
    const GemmPlan plan = plan_of(a, true);
    if (plan.route != GemmRoute::kFastGemv) return false;
    const int64_t k = a.w.cols * a.groups;
    ExactBlockArgs p = block_args(a, a.y_stride ? a.y_stride : a.w.rows);
    p.x = a.x, p.x_ld = a.x_stride ? a.x_stride : k;
    p.w_b = w_b.data, p.w_scale_b = w_b.scale, p.y_b = y_b;
    if (!fast_gemv_takes(p)) return false;
    fast_gemv(p, {plan.gemv_k_parts, plan.gemv_items}, stream);
    return true;
  }

  void run_pair(const GemmArgs& a, const GemmWeight& w_b, void* y_b) {
    const GemmWeight& w = a.w;
    const bool plain = w.kind == GemmWeightKind::kBf16 || w.kind == GemmWeightKind::kF32;
    const bool same = w_b.kind == w.kind && w_b.rows == w.rows && w_b.cols == w.cols;
    DSV4_CHECK(w_b.data && y_b, "gemm: a pair needs its second weight and output");
    if (!plain && same && a.rows > 0) {
      run_checks(a);
      if (gemv_pair(a, w_b, y_b)) return;
    }
    const GemmPlan plan = plain && same && a.rows > 0 ? plan_of(a, true) : GemmPlan{};
    const GemmRoute route = plan.route;
    if (route == GemmRoute::kFastSgemm || route == GemmRoute::kFastPlainGemv) {
      run_checks(a);
      ExactPlainArgs p = plain_args(a, policy.plain_wide_min_tiles);
      p.w_b = w_b.data, p.y_b = y_b;
      if (route == GemmRoute::kFastSgemm && fast_sgemm_takes(p)) {
        fast_sgemm(p, stream);
        return;
      }
      if (route == GemmRoute::kFastPlainGemv && fast_plain_gemv_takes(p)) {
        fast_plain_gemv(p, plan.plain_k_parts, stream);
        return;
      }
    }
    if (route != GemmRoute::kExactPlain) {
      run(a);
      GemmArgs b = a;
      b.w = w_b;
      b.y = y_b;
      run(b);
      return;
    }
    run_checks(a);
    ExactPlainArgs p = plain_args(a, policy.plain_wide_min_tiles);
    p.w_b = w_b.data, p.y_b = y_b;
    exact_plain_gemm(p, stream);
  }

  GemmPlan plan_of(const GemmArgs& a, bool pair) const {
    GemmProblem p;
    p.weight = a.w.kind;
    p.rows = a.rows;
    p.n = a.w.rows;
    p.kg = a.w.cols;
    p.groups = a.groups;
    p.pair = pair;
    p.exact = a.exact;
    p.fp8_twin = a.w.fp8_twin != nullptr;
    return plan_gemm(p, policy, caps);
  }

  void run_checks(const GemmArgs& a) {
    const GemmWeight& w = a.w;
    DSV4_CHECK(a.groups >= 1 && w.rows > 0 && w.cols > 0 && w.rows % a.groups == 0,
               "gemm: {} weight rows do not split into {} groups", w.rows, a.groups);
    DSV4_CHECK(a.rows >= 0 && a.x && a.y && w.data, "gemm: missing operands");
  }

  void run(const GemmArgs& a) {
    const GemmWeight& w = a.w;
    run_checks(a);
    const int64_t k = w.cols * a.groups;
    const int64_t x_ld = a.x_stride ? a.x_stride : k, y_ld = a.y_stride ? a.y_stride : w.rows;
    if (a.rows == 0) return;
    const GemmPlan plan = plan_of(a, false);
    if (w.kind == GemmWeightKind::kBf16 || w.kind == GemmWeightKind::kF32) {
      if (plan.route == GemmRoute::kCublasLt && lt_bf16(a, x_ld, y_ld)) return;
      const ExactPlainArgs p = plain_args(a, policy.plain_wide_min_tiles);
      if (plan.route == GemmRoute::kFastPlainGemv && fast_plain_gemv_takes(p)) {
        fast_plain_gemv(p, plan.plain_k_parts, stream);
        return;
      }
      const bool sgemm = plan.route == GemmRoute::kFastSgemm || plan.fallback == GemmRoute::kFastSgemm;
      if (sgemm && fast_sgemm_takes(p)) {
        fast_sgemm(p, stream);
        return;
      }
      exact_plain_gemm(p, stream);
      return;
    }
    DSV4_CHECK(w.scale && w.cols % 128 == 0, "gemm: a block-scaled weight needs scales and K % 128 == 0");
    ExactBlockArgs p = block_args(a, y_ld);
    if (plan.route == GemmRoute::kExactBlock) {
      run_exact_block(a, p, x_ld);
      return;
    }
    if (plan.route == GemmRoute::kFastMma || plan.route == GemmRoute::kFastGemv) {
      // bf16 rows straight in where the kernel quantizes them
      p.x = a.x, p.x_ld = x_ld;
      if (plan.route == GemmRoute::kFastGemv && fast_gemv_takes(p)) {
        fast_gemv(p, {plan.gemv_k_parts, plan.gemv_items}, stream);
        return;
      }
      if (plan.route == GemmRoute::kFastMma && fast_mma_takes_bf16(p, {plan.tile_rows, plan.splits, plan.resident})) {
        fast_mma(p, plan);
        return;
      }
      p.x = nullptr, p.x_ld = 0;
    }
    // cuBLASLt and the fast kernel take codes; cuBLASLt also the weight's scales as fp32, converted in
    // the quantizing launch every call (a cached copy would go stale when weights are freed).
    const bool on_lt = plan.route == GemmRoute::kCublasLt;
    const int64_t scale_ld = act_scale_ld(a.rows);
    const size_t code_bytes = (static_cast<size_t>(a.rows * k) + 255) / 256 * 256;
    const size_t act_scale_bytes = static_cast<size_t>(k / 128 * scale_ld) * 4;
    const size_t w_scale_bytes = on_lt ? static_cast<size_t>((w.rows + 127) / 128 * weight_scale_ld(w.cols)) * 4 : 0;
    auto* codes = static_cast<uint8_t*>(act_scratch(code_bytes + act_scale_bytes + w_scale_bytes));
    auto* act_scales = reinterpret_cast<float*>(codes + code_bytes);
    float* w_scales = on_lt ? act_scales + act_scale_bytes / 4 : nullptr;
    const WeightScaleJob job = on_lt ? WeightScaleJob{w.scale, w.rows, w.cols, w_scales} : WeightScaleJob{};
    quantize_act(a.x, a.rows, k, x_ld, codes, act_scales, scale_ld, stream, job);
    if (on_lt && lt_fp8(a, codes, act_scales, scale_ld, y_ld, w_scales)) return;
    p.codes = codes, p.codes_ld = k, p.scales = act_scales, p.scale_ld = scale_ld;
    fast_mma(p, plan);
  }

  // The exact block kernels: the SIMT kernels quantize bf16 rows as they read them; the int8
  // tensor-core kernel takes codes split into digit planes (for many rows the FP8 weight's too).
  void run_exact_block(const GemmArgs& a, ExactBlockArgs& p, int64_t x_ld) {
    const GemmWeight& w = a.w;
    const int64_t k = w.cols * a.groups;
    const bool imma = imma_wanted(w.kind, a.rows, w.cols, w.rows, policy);
    if (!imma && alignment_of(a.x) >= 16 && x_ld % 8 == 0) {
      p.x = a.x, p.x_ld = x_ld;
      split_scratch(p);
      exact_block_gemm(p, policy, stream);
      return;
    }
    const int64_t scale_ld = act_scale_ld(a.rows);
    const size_t code_bytes = (static_cast<size_t>(a.rows * k) + 255) / 256 * 256;
    const size_t act_scale_bytes = static_cast<size_t>(k / 128 * scale_ld) * 4;
    const bool w_planes = imma && w.kind == GemmWeightKind::kFp8 && imma_weight_planes(a.rows);
    const size_t a_digit_bytes = imma ? static_cast<size_t>(digit_plane_bytes(a.rows, k)) : 0;
    const size_t w_digit_bytes = w_planes ? static_cast<size_t>(digit_plane_bytes(w.rows, w.cols)) : 0;
    auto* codes = static_cast<uint8_t*>(act_scratch(code_bytes + act_scale_bytes + a_digit_bytes + w_digit_bytes));
    auto* act_scales = reinterpret_cast<float*>(codes + code_bytes);
    auto* digits = reinterpret_cast<int8_t*>(codes + code_bytes + act_scale_bytes);
    quantize_act(a.x, a.rows, k, x_ld, codes, act_scales, scale_ld, stream);
    p.codes = codes, p.codes_ld = k, p.scales = act_scales, p.scale_ld = scale_ld;
    if (imma) {
      digit_planes(codes, a.rows, k, k, digits, a.rows * k, stream);
      p.a_digits = digits, p.a_digit_stride = a.rows * k;
    }
    if (w_planes) {
      int8_t* wd = digits + a_digit_bytes;
      digit_planes(static_cast<const uint8_t*>(w.data), w.rows, w.cols, w.cols, wd, w.rows * w.cols, stream);
      p.w_digits = wd;
    }
    if (!imma) split_scratch(p);  // split-K is the SIMT kernels'
    exact_block_gemm(p, policy, stream);
  }

  GemmPlan plan_grouped(GemmWeightKind kind, int64_t rows, int experts, int64_t n, int64_t k, bool pair,
                        bool kept = false) const {
    GemmProblem p;
    p.weight = kind;
    p.rows = rows;
    p.experts = experts;
    p.n = n;
    p.kg = k;
    p.pair = pair;
    p.kept = kept;
    return plan_gemm(p, policy, caps);
  }

  static ExactBlockArgs grouped_block_args(const GroupedGemmArgs& a) {
    ExactBlockArgs p;
    p.kind = a.kind;
    p.codes = a.a_codes, p.codes_ld = a.k, p.scales = a.a_scales, p.scale_ld = a.scale_ld;
    p.rows = a.rows, p.n = a.n, p.ng = a.n, p.kg = a.k;
    p.w_list = a.w_data, p.w_scale_list = a.w_scale, p.offsets = a.offsets, p.experts = a.experts;
    p.y = a.y, p.y_ld = a.y_ld ? a.y_ld : a.n;
    p.w_list_b = a.w_data_b, p.w_scale_list_b = a.w_scale_b, p.y_b = a.y_b;
    p.offsets_settled = a.offsets_settled;
    return p;
  }

  void grouped(const GroupedGemmArgs& a) {
    const bool pair = a.y_b != nullptr && a.w_data_b != nullptr;  // has_pair of the call's arguments
    const bool kept =
        a.kind == GemmWeightKind::kFp4 && a.reencode_checked && keeps(a.w_data, a.w_data_b, pair, a.n, a.k, a.experts);
    const GemmPlan plan = plan_grouped(a.kind, a.rows, a.experts, a.n, a.k, a.y_b != nullptr, kept);
    const bool fast = plan.route == GemmRoute::kFastMma || plan.route == GemmRoute::kWgmma ||
                      plan.route == GemmRoute::kFastGemv || plan.route == GemmRoute::kCublasLtExperts;
    if (!fast) {
      grouped_gemm(a, policy, stream);
      return;
    }
    DSV4_CHECK(a.experts > 0 && a.offsets && a.w_data && a.w_scale && a.y, "grouped gemm: missing arguments");
    const ExactBlockArgs p = grouped_block_args(a);
    if (plan.route == GemmRoute::kCublasLtExperts) {
      if (lt_experts(p, plan, a)) {
        ++stats.lt_expert_calls;
        return;
      }
      ++stats.lt_expert_fallbacks;
    }
    fast_mma(p, plan);
  }
};

GemmRunner::GemmRunner(cudaStream_t stream, const GemmPolicy& policy, int32_t* error_flag)
    : impl_(std::make_unique<Impl>(stream, policy, error_flag)) {}
GemmRunner::~GemmRunner() = default;

void GemmRunner::run(const GemmArgs& a) {
  ++impl_->calls;
  impl_->run(a);
}
void GemmRunner::run_pair(const GemmArgs& a, const GemmWeight& w_b, void* y_b) {
  ++impl_->calls;
  impl_->run_pair(a, w_b, y_b);
}
void GemmRunner::grouped(const GroupedGemmArgs& a) {
  ++impl_->calls;
  impl_->grouped(a);
}
std::optional<bool> GemmRunner::fp4_experts_reencode_exactly(const GroupedGemmArgs& a) {
  return impl_->fp4_experts_reencode_exactly(a);
}
void GemmRunner::forget_kept_experts(const void* const* w_list) { impl_->forget_kept_experts(w_list); }
void GemmRunner::set_kept_budget(int64_t bytes) { impl_->kept_budget = std::max<int64_t>(0, bytes); }
const GemmPolicy& GemmRunner::policy() const { return impl_->policy; }
GemmRunner::Stats GemmRunner::stats() const { return impl_->stats; }

bool GemmRunner::wants_digit_planes(GemmWeightKind kind, int64_t rows, int experts, int64_t k) const {
  // A grouped call's route does not depend on its column count: any positive one plans it.
  if (impl_->plan_grouped(kind, rows, experts, /*n=*/k, k, false).route != GemmRoute::kExactBlock) return false;
  const int64_t per_weight = experts > 0 ? (rows + experts - 1) / experts : rows;
  const GemmPolicy& policy = impl_->policy;
  return imma_wanted(kind, per_weight, k, 0, policy) || fp4_gemv_takes(kind, per_weight, k) ||
         imma_skinny_takes(kind, per_weight, k, policy);
}

bool GemmRunner::lt_experts_planned(GemmWeightKind kind, int64_t rows, int experts, int64_t k, bool kept) const {
  return impl_->plan_grouped(kind, rows, experts, /*n=*/k, k, true, kept).route == GemmRoute::kCublasLtExperts;
}

bool GemmRunner::keeps_experts(const void* const* w_list, const void* const* w_list_b, int64_t n, int64_t k,
                               int experts) const {
  return impl_->keeps(w_list, w_list_b, w_list_b != nullptr, n, k, experts);
}

}  // namespace dsv4::cuda
