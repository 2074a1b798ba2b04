// Environment switches (DSV4_*): the value of a variable, empty when it is unset.
#pragma once

#include <cstdlib>
#include <string_view>

namespace dsv4 {

inline std::string_view env_value(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string_view(v) : std::string_view();
}

}  // namespace dsv4
