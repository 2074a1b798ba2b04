#include "backend/op_profile.h"

#include <algorithm>

namespace dsv4 {

void OpProfile::enable(bool on) {
  if (on) {
    dev_.synchronize();
    dev_.clear_marks();
    spans_.clear();
    totals_.clear();
  } else {
    collect();
  }
  on_ = on;
}

void OpProfile::collect() {
  if (spans_.empty()) return;
  dev_.synchronize();
  for (const Span& s : spans_) {
    OpTime& t = totals_[s.op];
    t.op = s.op;
    ++t.calls;
    t.ms += dev_.elapsed_ms(s.begin, s.end);
    t.host_ms += s.host_ms;
  }
  spans_.clear();
  dev_.clear_marks();
}

std::string OpProfile::label(const char*, const LinearParams& p) {
  std::string s = "linear " + std::string(weight_type_name(p.w.type)) + " " + std::to_string(p.w.rows) + "x" +
                  std::to_string(p.w.cols);
  return p.groups > 1 ? s + " x" + std::to_string(p.groups) : s;
}

std::vector<OpTime> OpProfile::totals() {
  collect();
  std::vector<OpTime> v;
  for (const auto& [op, t] : totals_) v.push_back(t);
  std::sort(v.begin(), v.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return v;
}

}  // namespace dsv4
