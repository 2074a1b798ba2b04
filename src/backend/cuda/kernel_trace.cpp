#include "backend/cuda/kernel_trace.h"

#include <cupti_activity.h>
#include <dlfcn.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace dsv4::cuda {
namespace {

constexpr const char* kSoname = "libcupti.so.13";
constexpr size_t kBufferBytes = size_t{8} << 20;  // ~40K kernel records a buffer

struct Cupti {
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  std::string error;  // non-empty: not usable, and why
};

// Records from the buffers CUPTI hands back (on its own thread), until stop_kernel_trace takes them.
struct Collected {
  std::mutex mu;
  std::vector<std::pair<uint32_t, Device::KernelSpan>> spans;  // (device id, span)
};
Collected& collected() {
  static Collected c;
  return c;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = kBufferBytes;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *max_records = 0;  // as many as fit
}

const Cupti& cupti();

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* record = nullptr;
  std::vector<std::pair<uint32_t, Device::KernelSpan>> got;
  while (cupti().next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL && record->kind != CUPTI_ACTIVITY_KIND_KERNEL) continue;
    // The newest record layout this header knows; later versions only append fields.
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    got.emplace_back(k->deviceId, Device::KernelSpan{k->name ? k->name : "?", k->start, k->end, k->streamId});
  }
  std::free(buffer);
  Collected& c = collected();
  const std::lock_guard<std::mutex> lock(c.mu);
  c.spans.insert(c.spans.end(), got.begin(), got.end());
}

template <typename F>
bool bind(void* h, const char* name, F& f, std::string& error) {
  f = reinterpret_cast<F>(::dlsym(h, name));
  if (!f && error.empty()) error = fmt::format("{} lacks {}", kSoname, name);
  return f != nullptr;
}

// The loader's path (this binary's RUNPATH, LD_LIBRARY_PATH), then the toolkit's usual places.
Cupti load() {
  Cupti c;
  std::vector<std::string> paths{kSoname};
  for (const char* var : {"CUDA_HOME", "CUDA_PATH"}) {
    if (const char* v = std::getenv(var)) paths.push_back(fmt::format("{}/extras/CUPTI/lib64/{}", v, kSoname));
  }
  paths.push_back(fmt::format("/usr/local/cuda/extras/CUPTI/lib64/{}", kSoname));
  paths.push_back(fmt::format("/usr/local/cuda/lib64/{}", kSoname));
  void* h = nullptr;
  for (const std::string& p : paths) {
    if ((h = ::dlopen(p.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
  }
  if (!h) {
    c.error = fmt::format("CUPTI ({}) was not found (tried {} places; the CUDA toolkit's extras/CUPTI has it)", kSoname,
                          paths.size());
    return c;
  }
  bind(h, "cuptiActivityRegisterCallbacks", c.register_callbacks, c.error);
  bind(h, "cuptiActivityEnable", c.enable, c.error);
  bind(h, "cuptiActivityDisable", c.disable, c.error);
  bind(h, "cuptiActivityFlushAll", c.flush_all, c.error);
  bind(h, "cuptiActivityGetNextRecord", c.next_record, c.error);
  bind(h, "cuptiGetResultString", c.result_string, c.error);
  if (!c.error.empty()) return c;
  if (const CUptiResult r = c.register_callbacks(buffer_requested, buffer_completed); r != CUPTI_SUCCESS) {
    const char* s = nullptr;
    c.result_string(r, &s);
    c.error = fmt::format("cuptiActivityRegisterCallbacks failed: {}", s ? s : "?");
  }
  return c;
}

const Cupti& cupti() {
  static const Cupti c = load();
  return c;
}

}  // namespace

bool start_kernel_trace(std::string& why) {
  const Cupti& c = cupti();
  if (!c.error.empty()) {
    why = c.error;
    return false;
  }
  {
    Collected& k = collected();
    const std::lock_guard<std::mutex> lock(k.mu);
    k.spans.clear();
  }
  // CONCURRENT_KERNEL: kernels keep overlapping as they would untraced (KERNEL would serialize them).
  if (const CUptiResult r = c.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL); r != CUPTI_SUCCESS) {
    const char* s = nullptr;
    c.result_string(r, &s);
    why = fmt::format("cuptiActivityEnable failed: {}", s ? s : "?");
    return false;
  }
  return true;
}

std::vector<Device::KernelSpan> stop_kernel_trace(int ordinal) {
  const Cupti& c = cupti();
  if (!c.error.empty()) return {};
  c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  c.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  std::vector<Device::KernelSpan> mine;
  Collected& k = collected();
  const std::lock_guard<std::mutex> lock(k.mu);
  for (auto& [device, span] : k.spans) {
    if (device == static_cast<uint32_t>(ordinal)) mine.push_back(std::move(span));
  }
  k.spans.clear();
  std::sort(mine.begin(), mine.end(), [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
  return mine;
}

}  // namespace dsv4::cuda
