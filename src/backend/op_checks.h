// Validation of op parameters: shapes, formats and pointers, before any work is done. The Ops front
// calls these before any backend sees the parameters; each throws dsv4::Error naming the op and the
// offending field. Contents of
// index arrays (slots, expert ids, token ids) are checked where a backend reads them.
#pragma once

#include "backend/op_params.h"

namespace dsv4 {

#define DSV4_OP_CHECK(name, P) void check_params(const P##Params& p);
DSV4_FOR_EACH_OP(DSV4_OP_CHECK)
#undef DSV4_OP_CHECK

}  // namespace dsv4
