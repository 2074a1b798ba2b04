// OpProfile: an Ops that forwards every call to another backend and, while enabled, puts a device mark
// (a CUDA event on the GPU) before and after each op; disabling it waits once and adds each op's device
// time to a per-op total. Nothing waits in between, so the step runs as unprofiled and the totals sum
// to the device's busy time (`bench step --profile`); an op the device had to wait for the host to
// issue also carries that wait. Each op's host time (the call's wall time: issuing it, and any wait for
// the device inside it) is summed beside: where an eager step's issue time goes.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "backend/device.h"
#include "backend/ops.h"

namespace dsv4 {

struct OpTime {
  std::string op;
  int64_t calls = 0;
  double ms = 0;       // device
  double host_ms = 0;  // the calls' wall time on the host
};

class OpProfile final : public Ops {
 public:
  OpProfile(Ops& inner, Device& dev) : inner_(inner), dev_(dev) {}
  void enable(bool on);          // on: clears the totals; off: waits and adds up the recorded ops
  std::vector<OpTime> totals();  // waits for the ops recorded so far; largest total first

  uint64_t scratch_epoch() const override { return inner_.scratch_epoch(); }

 protected:
#define DSV4_PROFILE_OP(name, P)                     \
  void do_##name(const P##Params& p) override {      \
    timed(label(#name, p), [&] { inner_.name(p); }); \
  }
  DSV4_FOR_EACH_OP(DSV4_PROFILE_OP)
#undef DSV4_PROFILE_OP

 private:
  void collect();  // waits for the recorded ops and adds their device times to the totals

  // An op's name, but "linear fp8 NxK" (xG for grouped): which GEMM shapes a step's linear time goes
  // to, and window-only attention apart.
  static std::string label(const char*, const LinearParams& p);
  static std::string label(const char* name, const SparseAttentionParams& p) {
    return p.compressed_width > 0 ? name : std::string(name) + " (window)";
  }
  template <typename P>
  static std::string label(const char* name, const P&) {
    return name;
  }

  template <typename F>
  void timed(const std::string& op, F&& run) {
    if (!on_) return run();
    const size_t m0 = dev_.mark();
    const auto t0 = std::chrono::steady_clock::now();
    run();
    const std::chrono::duration<double, std::milli> host = std::chrono::steady_clock::now() - t0;
    spans_.push_back({op, m0, dev_.mark(), host.count()});
  }

  struct Span {
    std::string op;
    size_t begin, end;  // device marks
    double host_ms;
  };

  Ops& inner_;
  Device& dev_;
  bool on_ = false;
  std::vector<Span> spans_;  // recorded, not yet read
  std::map<std::string, OpTime> totals_;
};

}  // namespace dsv4
