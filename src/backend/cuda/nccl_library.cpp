#include "backend/cuda/nccl_library.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <glob.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <variant>
#include <vector>

#include "core/error.h"

namespace dsv4::cuda {

namespace {

constexpr const char* kSoname = "libnccl.so.2";

void add_glob(const std::string& pattern, std::vector<std::string>& out) {
  glob_t g{};
  if (::glob(pattern.c_str(), 0, nullptr, &g) == 0) {
    for (size_t i = 0; i < g.gl_pathc; ++i) out.emplace_back(g.gl_pathv[i]);
  }
  ::globfree(&g);
}

// Python's nvidia/nccl/lib as the python3 on PATH sees it ("" when it has no such package).
std::string python_nccl_dir() {
  std::unique_ptr<FILE, int (*)(FILE*)> p(
      ::popen("python3 -c 'import nvidia.nccl as m; print(list(m.__path__)[0])' 2>/dev/null", "r"), ::pclose);
  char line[4096] = {};
  if (!p || !std::fgets(line, sizeof(line), p.get())) return "";
  std::string dir(line);
  while (!dir.empty() && (dir.back() == '\n' || dir.back() == '\r')) dir.pop_back();
  return dir.empty() ? "" : dir + "/lib";
}

template <typename F>
void bind(void* handle, const std::string& path, const char* name, F& f) {
  f = reinterpret_cast<F>(::dlsym(handle, name));
  DSV4_CHECK(f != nullptr, "NCCL at {} lacks {} (dsv4 needs NCCL 2.14 or later)", path, name);
}

NcclLibrary bind_all(void* h, const std::string& path) {
  NcclLibrary l;
  l.path = path;
  bind(h, path, "ncclGetVersion", l.get_version);
  bind(h, path, "ncclGetErrorString", l.get_error_string);
  bind(h, path, "ncclGetLastError", l.get_last_error);
  bind(h, path, "ncclGetUniqueId", l.get_unique_id);
  bind(h, path, "ncclCommInitRankConfig", l.comm_init_rank_config);
  bind(h, path, "ncclCommGetAsyncError", l.comm_get_async_error);
  bind(h, path, "ncclCommFinalize", l.comm_finalize);
  bind(h, path, "ncclCommDestroy", l.comm_destroy);
  bind(h, path, "ncclCommAbort", l.comm_abort);
  bind(h, path, "ncclAllGather", l.all_gather);
  bind(h, path, "ncclReduceScatter", l.reduce_scatter);
  bind(h, path, "ncclAllReduce", l.all_reduce);
  bind(h, path, "ncclBroadcast", l.broadcast);
  bind(h, path, "ncclSend", l.send);
  bind(h, path, "ncclRecv", l.recv);
  bind(h, path, "ncclGroupStart", l.group_start);
  bind(h, path, "ncclGroupEnd", l.group_end);
  DSV4_CHECK(l.get_version(&l.version) == ncclSuccess, "NCCL at {}: ncclGetVersion failed", path);
  return l;
}

}  // namespace

// The loader's path (LD_LIBRARY_PATH, ld.so.cache), the toolkit, Python's wheel.
std::vector<std::string> nccl_search_paths() {
  std::vector<std::string> c{kSoname};
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* v = std::getenv(var)) c.push_back(fmt::format("{}/lib64/{}", v, kSoname));
  }
  c.push_back(fmt::format("/usr/local/cuda/lib64/{}", kSoname));
  for (const char* prefix : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
    if (const char* v = std::getenv(prefix))
      add_glob(fmt::format("{}/lib/python3*/site-packages/nvidia/nccl/lib/{}", v, kSoname), c);
  }
  for (const char* site :
       {"/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
        "/usr/lib/python3/dist-packages", "/usr/lib/python3*/site-packages", "/opt/conda/lib/python3*/site-packages"}) {
    add_glob(fmt::format("{}/nvidia/nccl/lib/{}", site, kSoname), c);
  }
  if (const std::string dir = python_nccl_dir(); !dir.empty()) c.push_back(fmt::format("{}/{}", dir, kSoname));
  std::vector<std::string> unique;
  for (std::string& p : c) {
    if (std::find(unique.begin(), unique.end(), p) == unique.end()) unique.push_back(std::move(p));
  }
  return unique;
}

NcclLibrary load_nccl_library(const std::vector<std::string>& paths) {
  for (const std::string& path : paths) {
    if (void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return bind_all(h, path);
  }
  fail(
      "NCCL is not available: {} was not found (tried {}). Multi-GPU runs need it: the CUDA toolkit's NCCL or "
      "the Python wheel nvidia-nccl-cu13",
      kSoname, fmt::join(paths, ", "));
}

const NcclLibrary& nccl_library() {
  // Loaded once; a failure is kept too, so every later call says the same.
  static const std::variant<NcclLibrary, std::string> loaded = []() -> std::variant<NcclLibrary, std::string> {
    try {
      return load_nccl_library(nccl_search_paths());
    } catch (const Error& e) {
      return std::string(e.what());
    }
  }();
  if (const auto* why = std::get_if<std::string>(&loaded)) throw Error(*why);
  return std::get<NcclLibrary>(loaded);
}

}  // namespace dsv4::cuda
