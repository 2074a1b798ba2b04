// Environment switches (DSV4_*): the value of a variable, empty when it is unset.
#pragma once

#include <cstdlib>
#include <string_view>

namespace dsv4 {

inline std::string_view env_value(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string_view(v) : std::string_view();
}

// A DSV4_* switch of core/env.cpp's table (empty when unset or empty): throws dsv4::Error for a value it
// does not take, where the default would otherwise be taken silently, and for a name not in the table.
std::string_view env_switch(const char* name);

// env_switch's check of every switch at once (backends call it on creation, before any kernel reads
// its switch).
void check_env_switches();

}  // namespace dsv4
