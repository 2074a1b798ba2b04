// Backend: the Ops and Device of one compute backend, chosen by name ("cpu", "cuda", or "auto" =
// cuda when this build has it and a GPU is present, else cpu). Callers above the backend room
// (engine, tools) pick a backend here and never name a concrete Ops class.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend/device.h"
#include "backend/numerics.h"
#include "backend/ops.h"

namespace dsv4 {

struct Backend {
  std::string name;         // "cpu" | "cuda"
  std::string description;  // one line for logs, e.g. "cuda: NVIDIA H200"
  Numerics numerics = Numerics::kExact;
  std::unique_ptr<Device> device;
  std::unique_ptr<Ops> ops;  // declared after device: destroyed first

  Backend() = default;
  Backend(Backend&&) noexcept = default;
  Backend& operator=(Backend&&) noexcept = default;
  ~Backend() {
    ops.reset();  // ops own device memory: free it before the device goes
  }
};

// Backends compiled into this build ("cpu" always; "cuda" when built with nvcc).
std::vector<std::string> built_backends();

// CPU threads of each of `ranks` backends sharing the host's cores: `threads` (0 = all cores) divided
// among them, at least one each.
int cpu_threads_per_rank(int threads, int ranks);

// Throws dsv4::Error for an unknown name or one this build or machine cannot run, and for a tier the
// backend does not implement (the CPU backend is exact only). Without a tier: fast on CUDA, exact on
// the CPU.
// `gpu`: the CUDA ordinal (ignored on the CPU).
Backend make_backend(std::string_view name, int cpu_threads = 0, std::optional<Numerics> numerics = std::nullopt,
                     int gpu = 0);

// "cpu" or "cuda" for a name make_backend takes ("auto" resolved as it resolves it).
std::string resolve_backend_name(std::string_view name);

// GPUs this process sees (0 without the CUDA backend).
int visible_gpus();

}  // namespace dsv4
