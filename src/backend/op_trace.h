// OpTrace: an Ops that forwards every call to another backend and keeps a host copy of what the
// call wrote: its dense outputs and the KV-table entries it stored. Two traces of the same model run
// on two backends line up call by call, so compare_traces names the first op where they part, which
// block-level checks cannot (`dsv4 golden-check --compare-ops`).
// Replay (spec/NUMERICS.md, the replay gate): a trace given the records of an earlier run writes that
// run's outputs over each call's own once they are recorded, so every op is fed the earlier run's
// inputs and judge_replay can hold each op alone to its gate: a chained comparison cannot judge
// anything after the first sum that differs.
// Every call synchronizes the device: a debugging tool, never on a serving path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/device.h"
#include "backend/ops.h"

namespace dsv4 {

enum class TraceElem : uint8_t { kBf16, kF32, kI32, kU8 };

// What the replay gate asks of an output, fed the exact run's inputs (spec/NUMERICS.md):
//   kBits       an op without sums (or one the fast tier leaves exact): the exact op's bits;
//   kLowSums    sums of FP8/FP4/bf16 products: calc_diff of every 128x128 tile <= 3e-5;
//   kFp32Sums   fp32 operands (or bf16 weights widened) with fp32 outputs: every tile <= 1e-10;
//   kSelection  indices chosen from such sums (top-k): at most 2% of them may differ, near-ties.
enum class ReplayGate : uint8_t { kBits, kLowSums, kFp32Sums, kSelection };

struct OpRecord {
  std::string op;  // "linear", "moe_experts.y", ...
  TraceElem elem = TraceElem::kBf16;
  std::vector<uint8_t> bytes;
  int64_t cols = 0;  // elements a row (the gate's tiles)
  ReplayGate gate = ReplayGate::kBits;
};

class OpTrace final : public Ops {
 public:
  // replay: the records of an earlier run of the same calls, written over each call's outputs.
  OpTrace(Ops& inner, Device& dev, const std::vector<OpRecord>* replay = nullptr)
      : inner_(inner), dev_(dev), replay_(replay) {}
  const std::vector<OpRecord>& records() const { return records_; }

  uint64_t scratch_epoch() const override { return inner_.scratch_epoch(); }

 protected:
  DSV4_OPS_OVERRIDE
 private:
  // Copies rows x cols elements (row stride `stride` elements) of a device array into a record
  // (replaying: then writes the earlier run's record over them).
  void keep(std::string op, TraceElem e, ReplayGate gate, const void* p, int64_t rows, int64_t cols,
            int64_t stride = 0);
  void keep_hc_pre(const HcPreParams& p);  // its three outputs
  void keep_hc_post(const HcPostParams& p);
  // The entries a call stored at slots[0..rows) of `table` (−1: none), as keep() does for dense outputs.
  void keep_entries(std::string op, ReplayGate gate, const EntryTable& table, const int32_t* slots, int64_t rows);
  // The earlier run's record for the call being kept, checked to be the same op and size.
  const OpRecord& replayed(const OpRecord& mine) const;

  Ops& inner_;
  Device& dev_;
  const std::vector<OpRecord>* replay_;
  std::vector<OpRecord> records_;
};

// One line per call whose outputs differ (at most max_lines), then one per op kind with its worst
// normalised difference; the first line names the first call where the traces part.
std::vector<std::string> compare_traces(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b,
                                        size_t max_lines = 40);

// The replay gate over a replayed trace and the exact run it was fed from: each call against its
// record's ReplayGate; one line per failing call (at most max_lines), then one per op kind with its
// worst measure and its bound.
struct ReplayVerdict {
  bool pass = true;
  std::vector<std::string> lines;
};
ReplayVerdict judge_replay(const std::vector<OpRecord>& replayed, const std::vector<OpRecord>& exact,
                           size_t max_lines = 40);

}  // namespace dsv4
