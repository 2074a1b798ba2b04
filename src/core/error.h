// Errors: one exception type carrying a message meant for the user.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace dsv4 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace dsv4

// Throws dsv4::Error with a formatted message when the condition does not hold.
#define DSV4_CHECK(cond, ...)               \
  do {                                      \
    if (!(cond)) ::dsv4::fail(__VA_ARGS__); \
  } while (0)
