// Where tests find data: the repository's tests/data (DSV4_DATA), an optional shared/ folder that only
// adds golden sets (DSV4_SHARED), and the build folder (DSV4_BUILD).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace dsv4::testing {

// tests/data of the source tree (DSV4_DATA overrides it, e.g. on the GPU machine).
std::filesystem::path data_dir();
// tests/data/golden/<name>, or <shared>/golden/<name> for a set only shared/ has.
std::filesystem::path golden_dir(const std::string& name);
// The optional shared/ folder (DSV4_SHARED, default ../shared); it may not exist.
std::filesystem::path shared_dir();
// A fresh, empty temporary directory removed at process exit.
std::filesystem::path temp_dir(const std::string& tag);

}  // namespace dsv4::testing
