#include "backend/op_profile.h"

#include <algorithm>

namespace dsv4 {

void OpProfile::enable(bool on) {
  if (on) {
    dev_.synchronize();
    totals_.clear();
  }
  on_ = on;
}

std::string OpProfile::linear_label(const LinearParams& p) {
  std::string s = "linear " + std::string(weight_type_name(p.w.type)) + " " + std::to_string(p.w.rows) + "x" +
                  std::to_string(p.w.cols);
  return p.groups > 1 ? s + " x" + std::to_string(p.groups) : s;
}

std::vector<OpTime> OpProfile::totals() const {
  std::vector<OpTime> v;
  for (const auto& [op, t] : totals_) v.push_back({op, t.first, t.second});
  std::sort(v.begin(), v.end(), [](const OpTime& a, const OpTime& b) { return a.ms > b.ms; });
  return v;
}

}  // namespace dsv4
