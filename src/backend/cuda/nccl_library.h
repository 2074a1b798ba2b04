// NcclLibrary: NCCL loaded at run time (dlopen "libnccl.so.2"), so the binary starts and runs the CPU
// backend where NCCL is absent, and says what is missing only when a multi-GPU run asks for it. The
// types come from the CUDA toolkit's nccl.h; the library is searched for on the loader's path, then in
// the toolkit's lib64, then in Python's nvidia/nccl/lib (the nvidia-nccl-cu13 wheel).
#pragma once

#include <nccl.h>

#include <string>
#include <vector>

namespace dsv4::cuda {

struct NcclLibrary {
  std::string path;  // the file it was loaded from
  int version = 0;   // ncclGetVersion's code, e.g. 22809
  decltype(&ncclGetVersion) get_version = nullptr;
  decltype(&ncclGetErrorString) get_error_string = nullptr;
  decltype(&ncclGetLastError) get_last_error = nullptr;
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRankConfig) comm_init_rank_config = nullptr;
  decltype(&ncclCommGetAsyncError) comm_get_async_error = nullptr;
  decltype(&ncclCommFinalize) comm_finalize = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclCommAbort) comm_abort = nullptr;
  decltype(&ncclAllGather) all_gather = nullptr;
  decltype(&ncclReduceScatter) reduce_scatter = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclBroadcast) broadcast = nullptr;
  decltype(&ncclSend) send = nullptr;
  decltype(&ncclRecv) recv = nullptr;
  decltype(&ncclGroupStart) group_start = nullptr;
  decltype(&ncclGroupEnd) group_end = nullptr;
};

// NCCL, loaded on the first call; throws dsv4::Error saying where it looked when it cannot be loaded.
const NcclLibrary& nccl_library();

// Where nccl_library() looks, in order.
std::vector<std::string> nccl_search_paths();
// The first of `paths` that dlopen() loads, with every function bound; throws dsv4::Error naming the
// paths when none loads.
NcclLibrary load_nccl_library(const std::vector<std::string>& paths);

}  // namespace dsv4::cuda
