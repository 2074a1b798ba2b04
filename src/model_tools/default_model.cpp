#include "model_tools/default_model.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "core/error.h"
#include "model_tools/presets.h"
#include "model_tools/random_checkpoint.h"

namespace dsv4 {
namespace fs = std::filesystem;

namespace {

constexpr const char* kPreset = "serve";
constexpr const char* kDoneMarker = ".complete";

// An exclusive flock held for the object's lifetime.
class FileLock {
 public:
  explicit FileLock(const fs::path& p) : fd_(::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    DSV4_CHECK(fd_ >= 0, "cannot open lock file {}", p.string());
    DSV4_CHECK(::flock(fd_, LOCK_EX) == 0, "cannot lock {}", p.string());
  }
  ~FileLock() {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

}  // namespace

fs::path dsv4_home() {
  if (const char* h = std::getenv("DSV4_HOME"); h && *h) return h;
  if (const char* home = std::getenv("HOME"); home && *home) return fs::path(home) / ".cache" / "dsv4";
  return fs::temp_directory_path() / "dsv4";
}

fs::path ensure_default_model() {
  const Preset& p = find_preset(kPreset);
  const fs::path models = dsv4_home() / "models";
  const fs::path dir = models / fmt::format("{}-seed{}", p.name, p.default_seed);
  if (fs::exists(dir / kDoneMarker)) return dir;
  fs::create_directories(models);
  FileLock lock(models / ".lock");
  if (fs::exists(dir / kDoneMarker)) return dir;  // another process made it while we waited
  spdlog::info("creating the default model ({}: {}) in {}", p.name, p.description, dir.string());
  const fs::path tmp = models / fmt::format(".{}-tmp-{}", p.name, ::getpid());
  fs::remove_all(tmp);
  write_random_checkpoint(p.config, p.default_seed, tmp);
  std::ofstream(tmp / kDoneMarker) << "ok\n";
  fs::remove_all(dir);
  fs::rename(tmp, dir);
  return dir;
}

}  // namespace dsv4
