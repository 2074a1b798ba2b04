// The Ops front (backend/ops.h): every op's parameters are checked (backend/op_checks.h) before any
// backend sees them, so no backend can skip the checks; checked parameters reach the backend's op
// exactly once.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "backend/op_checks.h"
#include "backend/ops.h"
#include "core/error.h"

namespace dsv4 {
namespace {

// Counts the calls that reach each op; does nothing else.
class CountingOps final : public Ops {
 public:
  std::map<std::string, int> calls;

 protected:
#define DSV4_COUNT_OP(name, P) \
  void do_##name(const P##Params&) override { ++calls[#name]; }
  DSV4_FOR_EACH_OP(DSV4_COUNT_OP)
#undef DSV4_COUNT_OP
};

// Whether the checks refuse p.
template <typename P>
bool refused(const P& p) {
  try {
    check_params(p);
  } catch (const Error&) {
    return true;
  }
  return false;
}

// One op with default parameters: where the checks refuse them, the front throws and the backend
// never sees the call; where they pass, the call reaches the backend once. Returns whether refused.
template <typename P, typename Call>
bool try_op(CountingOps& ops, const char* name, Call&& call) {
  const P p{};
  const bool bad = refused(p);
  bool threw = false;
  try {
    call(p);
  } catch (const Error&) {
    threw = true;
  }
  EXPECT_EQ(threw, bad) << name;
  EXPECT_EQ(ops.calls[name], bad ? 0 : 1) << name << (bad ? ": refused parameters reached the backend" : "");
  return bad;
}

TEST(OpsFront, EveryOpIsCheckedBeforeTheBackend) {
  CountingOps ops;
  int refusals = 0;
#define DSV4_TRY_OP(name, P) refusals += try_op<P##Params>(ops, #name, [&](const P##Params& p) { ops.name(p); });
  DSV4_FOR_EACH_OP(DSV4_TRY_OP)
#undef DSV4_TRY_OP
  EXPECT_GE(refusals, 20) << "default parameters should be refused by nearly every op's checks";
}

TEST(OpsFront, CheckedParametersReachTheBackendOnce) {
  CountingOps ops;
  std::vector<uint16_t> x(8, 0x3f80), y(8), w(4, 0x3f80);
  RmsNormParams norm{x.data(), y.data(), w.data(), 2, 4, 1e-6f};
  ops.rms_norm(norm);
  EXPECT_EQ(ops.calls["rms_norm"], 1);
  norm.dim = 0;  // refused: nothing reaches the backend
  EXPECT_THROW(ops.rms_norm(norm), Error);
  EXPECT_EQ(ops.calls["rms_norm"], 1);
  std::vector<float> logits(6, 1.0f);
  std::vector<int32_t> out(2);
  ArgmaxParams am{logits.data(), 2, 3, 3, out.data()};
  ops.argmax(am);
  EXPECT_EQ(ops.calls["argmax"], 1);
  am.limit = 4;  // past cols
  EXPECT_THROW(ops.argmax(am), Error);
  EXPECT_EQ(ops.calls["argmax"], 1);
  EXPECT_EQ(ops.calls.size(), 2u);
}

}  // namespace
}  // namespace dsv4
