// Validation of op parameters: shapes, formats and pointers, before any work is done. Every backend
// calls these first; each throws dsv4::Error naming the op and the offending field. Contents of
// index arrays (slots, expert ids, token ids) are checked where a backend reads them.
#pragma once

#include "backend/ops.h"

namespace dsv4 {

void check_params(const LinearParams& p);
void check_params(const RmsNormParams& p);
void check_params(const HeadRmsNormParams& p);
void check_params(const RopeParams& p);
void check_params(const HadamardParams& p);
void check_params(const QuantSimParams& p);
void check_params(const StoreEntriesParams& p);
void check_params(const KvInsertParams& p);
void check_params(const SparseAttentionParams& p);
void check_params(const CompressorStepParams& p);
void check_params(const CompressorEmitParams& p);
void check_params(const IndexerTopkParams& p);
void check_params(const HcPreParams& p);
void check_params(const HcPostParams& p);
void check_params(const HcHeadParams& p);
void check_params(const MoeGateParams& p);
void check_params(const MoeExpertsParams& p);
void check_params(const SharedExpertParams& p);
void check_params(const EmbedParams& p);
void check_params(const PagedSlotsParams& p);
void check_params(const ArgmaxParams& p);
void check_params(const SampleParams& p);

}  // namespace dsv4
