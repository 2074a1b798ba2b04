// A step's temporary device array (at least one element, so that an empty step still has a pointer).
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend/device.h"

namespace dsv4 {

template <typename T>
DeviceArray<T> scratch(Device& d, int64_t n) {
  return DeviceArray<T>(d, static_cast<size_t>(std::max<int64_t>(n, 1)));
}

}  // namespace dsv4
