#include <atomic>

#include "backend/cuda/launch.cuh"
#include "core/env.h"

namespace dsv4::cuda {
namespace {

std::atomic<bool>& pdl_switch() {
  static std::atomic<bool> on{env_switch("DSV4_PDL") != "0"};
  return on;
}

}  // namespace

bool pdl_on() { return pdl_switch().load(std::memory_order_relaxed); }
void set_pdl(bool on) { pdl_switch().store(on); }

}  // namespace dsv4::cuda
