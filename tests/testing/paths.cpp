#include "testing/paths.h"

#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace dsv4::testing {
namespace fs = std::filesystem;

fs::path data_dir() {
  if (const char* d = std::getenv("DSV4_DATA")) return d;
  return DSV4_TEST_DATA_DIR;  // the source tree's, compiled in so that a test binary run by hand finds it
}

fs::path shared_dir() {
  if (const char* s = std::getenv("DSV4_SHARED")) return s;
  return "../shared";
}

fs::path golden_dir(const std::string& name) {
  const fs::path in_repo = data_dir() / "golden" / name;
  if (fs::exists(in_repo)) return in_repo;
  const fs::path extra = shared_dir() / "golden" / name;
  return fs::exists(extra) ? extra : in_repo;  // a missing set is named where it belongs
}

namespace {
std::vector<fs::path>& created() {
  static std::vector<fs::path> dirs;
  static const bool registered = [] {
    std::atexit([] {
      std::error_code ec;
      for (const auto& d : created()) fs::remove_all(d, ec);
    });
    return true;
  }();
  (void)registered;
  return dirs;
}
}  // namespace

fs::path temp_dir(const std::string& tag) {
  static std::mutex mu;
  std::lock_guard lock(mu);
  static int counter = 0;
  fs::path d = fs::temp_directory_path() /
               ("dsv4-test-" + tag + "-" + std::to_string(getpid()) + "-" + std::to_string(counter++));
  fs::remove_all(d);
  fs::create_directories(d);
  created().push_back(d);
  return d;
}

}  // namespace dsv4::testing
