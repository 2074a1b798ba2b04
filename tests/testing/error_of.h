// The message of the dsv4::Error that f throws ("" when it throws none): for tests of what an error
// says, not only that one is thrown.
#pragma once

#include <string>
#include <utility>

#include "core/error.h"

namespace dsv4::testing {

template <typename F>
std::string error_of(F&& f) {
  try {
    std::forward<F>(f)();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace dsv4::testing
