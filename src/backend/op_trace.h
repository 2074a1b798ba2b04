// OpTrace: an Ops that forwards every call to another backend and keeps a host copy of what the
// call wrote to its dense outputs (table writes show up in the attention outputs that read them).
// Two traces of the same model run on two backends line up call by call, so compare_traces names
// the first op where they part, which block-level checks cannot (`dsv4 golden-check --compare-ops`).
// Every call synchronizes the device: a debugging tool, never on a serving path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/device.h"
#include "backend/ops.h"

namespace dsv4 {

enum class TraceElem : uint8_t { kBf16, kF32, kI32 };

struct OpRecord {
  std::string op;  // "linear", "moe_experts.y", ...
  TraceElem elem = TraceElem::kBf16;
  std::vector<uint8_t> bytes;
};

class OpTrace final : public Ops {
 public:
  OpTrace(Ops& inner, Device& dev) : inner_(inner), dev_(dev) {}
  const std::vector<OpRecord>& records() const { return records_; }

  uint64_t scratch_epoch() const override { return inner_.scratch_epoch(); }

 protected:
  DSV4_OPS_OVERRIDE
 private:
  // Copies rows x cols elements (row stride `stride` elements) of a device array into a record.
  void keep(std::string op, TraceElem e, const void* p, int64_t rows, int64_t cols, int64_t stride = 0);

  Ops& inner_;
  Device& dev_;
  std::vector<OpRecord> records_;
};

// One line per call whose outputs differ (at most max_lines), then one per op kind with its worst
// normalised difference; the first line names the first call where the traces part.
std::vector<std::string> compare_traces(const std::vector<OpRecord>& a, const std::vector<OpRecord>& b,
                                        size_t max_lines = 40);

}  // namespace dsv4
