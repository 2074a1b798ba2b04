// A backend weight view (backend/weight.h) as the GEMM layer takes it (gemm.h): the same pointers and
// shape, the type named as the GEMM's kind.
#pragma once

#include "backend/cuda/gemm.h"
#include "backend/weight.h"

namespace dsv4::cuda {

inline GemmWeightKind gemm_kind(WeightType t) {
  switch (t) {
    case WeightType::kFp8Block:
      return GemmWeightKind::kFp8;
    case WeightType::kFp4Block:
      return GemmWeightKind::kFp4;
    case WeightType::kBf16:
      return GemmWeightKind::kBf16;
    case WeightType::kF32:
      return GemmWeightKind::kF32;
  }
  return GemmWeightKind::kBf16;
}

inline GemmWeight gemm_weight(const Weight& w) {
  return {gemm_kind(w.type), w.data, w.scale, w.rows, w.cols, w.fp8_twin, w.fp8_twin_scale};
}

}  // namespace dsv4::cuda
