// A parallel layout's name in parameterized test names: tp2_dp1_ep.
#pragma once

#include <string>

#include "model/parallel_layout.h"

namespace dsv4::testing {

struct LayoutName {
  template <typename Info>
  std::string operator()(const Info& info) const {
    const ParallelConfig& p = info.param;
    return "tp" + std::to_string(p.tp) + "_dp" + std::to_string(p.dp) + (p.expert_parallel ? "_ep" : "");
  }
};

}  // namespace dsv4::testing
