#include "testing/paths.h"

#include <unistd.h>

#include <cstdlib>
#include <mutex>
#include <vector>

namespace dsv4::testing {
namespace fs = std::filesystem;

fs::path shared_dir() {
  if (const char* s = std::getenv("DSV4_SHARED")) return s;
  return "../shared";
}

fs::path golden_dir(const std::string& name) { return shared_dir() / "golden" / name; }

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
