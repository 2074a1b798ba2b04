// Environment switches (DSV4_*): the value of a variable, empty when it is unset.
#pragma once

#include <cstdlib>
#include <string_view>

namespace dsv4 {

inline std::string_view env_value(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string_view(v) : std::string_view();
}

// Throws dsv4::Error naming the first DSV4_* switch set to a value it does not take (the kernels read
// them once, where an unknown value would silently mean the default). Backends call it on creation.
void check_env_switches();

}  // namespace dsv4
