#include "backend/ops.h"

#include "backend/op_checks.h"

namespace dsv4 {

// Every op: check, then the backend's own.
#define DSV4_OP_FRONT_BODY(name, P)    \
  void Ops::name(const P##Params& p) { \
    check_params(p);                   \
    do_##name(p);                      \
  }
DSV4_FOR_EACH_OP(DSV4_OP_FRONT_BODY)
#undef DSV4_OP_FRONT_BODY

}  // namespace dsv4
