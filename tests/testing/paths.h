// Where tests find data: ../shared (DSV4_SHARED) and the build folder (DSV4_BUILD).
#pragma once

#include <filesystem>
#include <string>

namespace dsv4::testing {

// The shared/ folder; the test is skipped by the caller when it does not exist.
std::filesystem::path shared_dir();
std::filesystem::path golden_dir(const std::string& name);  // shared/golden/<name>
// A fresh, empty temporary directory removed at process exit.
std::filesystem::path temp_dir(const std::string& tag);

}  // namespace dsv4::testing

// Skips the current test when shared/ is absent (e.g. on the GPU machine without the carry).
#define DSV4_REQUIRE_SHARED()                                                   \
  do {                                                                          \
    if (!std::filesystem::exists(::dsv4::testing::shared_dir() / "golden"))     \
      GTEST_SKIP() << "shared/ not found at " << ::dsv4::testing::shared_dir(); \
  } while (0)
