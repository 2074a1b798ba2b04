#include "backend/cuda/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "backend/comm/rank_order_sum.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/nccl_library.h"
#include "backend/cuda/nccl_watchdog.h"
#include "core/error.h"

namespace dsv4::cuda {

namespace {

ncclDataType_t nccl_type(DType type) {
  reduce_element_size(type);  // refuses what the collectives do not reduce
  return type == DType::kF32 ? ncclFloat32 : ncclBfloat16;
}

const std::byte* at(const void* p, size_t offset) { return static_cast<const std::byte*>(p) + offset; }
std::byte* at(void* p, size_t offset) { return static_cast<std::byte*>(p) + offset; }

}  // namespace

NcclCommunicator::UniqueId NcclCommunicator::make_unique_id() {
  const NcclLibrary& nccl = nccl_library();
  ncclUniqueId id;
  const ncclResult_t r = nccl.get_unique_id(&id);
  DSV4_CHECK(r == ncclSuccess, "NCCL: ncclGetUniqueId failed: {}", nccl.get_error_string(r));
  UniqueId out;
  static_assert(sizeof(id) == sizeof(out));
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::join(CudaDevice& device, const RendezvousOptions& options) {
  std::vector<std::byte> blob;
  if (options.rank == 0) {
    const UniqueId id = make_unique_id();
    blob.assign(id.begin(), id.end());
  }
  blob = rendezvous(options, blob);
  UniqueId id;
  DSV4_CHECK(blob.size() == id.size(), "NCCL: the rendezvous gave {} bytes, not a unique id", blob.size());
  std::copy(blob.begin(), blob.end(), id.begin());
  return std::make_unique<NcclCommunicator>(device, id, options.rank, options.world_size, options.timeout);
}

NcclCommunicator::NcclCommunicator(CudaDevice& device, const UniqueId& id, int rank, int size,
                                   std::chrono::milliseconds timeout, Join when)
    : device_(device), rank_(rank), size_(size), timeout_(timeout), id_(id) {
  DSV4_CHECK(size >= 1 && rank >= 0 && rank < size, "NCCL: rank {} of {}", rank, size);
  DSV4_CUDA_CHECK(cudaSetDevice(device.ordinal()));
  token_ = static_cast<float*>(device_.allocate(sizeof(float)));
  device_.fill_zero(token_, sizeof(float));
  if (when == Join::kNow) {
    std::lock_guard lock(mu_);
    join_locked();
  }
}

void NcclCommunicator::join_locked() {
  const NcclLibrary& nccl = nccl_library();
  // NVLink multicast can take a shared host's GPUs out of service: never on unless someone says so.
  ::setenv("NCCL_NVLS_ENABLE", "0", 0);
  DSV4_CUDA_CHECK(cudaSetDevice(device_.ordinal()));
  ncclUniqueId nid;
  std::memcpy(&nid, id_.data(), sizeof(nid));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // every wait for the peers is ours, bounded by the timeout
  joined_ = true;       // once tried: a failed join aborts, it is not tried again
  settle(nccl.comm_init_rank_config(&comm_, size_, nid, rank_, &config), "joining");
  watchdog_ = std::make_unique<NcclWatchdog>(
      device_.ordinal(), timeout_, [this] { return async_error(); },
      [this](const std::string& why) { abort(fmt::format("NCCL on rank {} of {}: {}", rank_, size_, why)); });
}

NcclCommunicator::~NcclCommunicator() {
  watchdog_.reset();  // no other thread touches the communicator from here on
  if (token_) device_.release(token_);
  if (!comm_) return;
  try {
    settle(nccl_library().comm_finalize(comm_), "finalizing");
    if (comm_) nccl_library().comm_destroy(comm_);
  } catch (const Error& e) {
    abort_locked(e.what());  // settle() has aborted already when it timed out; here after any other failure
  }
  comm_ = nullptr;
}

void NcclCommunicator::abort(const std::string& reason) noexcept {
  std::lock_guard lock(mu_);
  abort_locked(reason);
}

void NcclCommunicator::abort_locked(const std::string& reason) noexcept {
  if (aborted_.empty()) aborted_ = reason;
  joined_ = true;  // a later call fails with the reason instead of joining
  if (comm_) nccl_library().comm_abort(comm_);
  comm_ = nullptr;
}

std::string NcclCommunicator::async_error() {
  std::lock_guard lock(mu_);
  if (!comm_) return "";
  const NcclLibrary& nccl = nccl_library();
  ncclResult_t r = ncclSuccess;
  nccl.comm_get_async_error(comm_, &r);
  if (r == ncclSuccess || r == ncclInProgress) return "";
  return fmt::format("{}: {}", nccl.get_error_string(r), nccl.get_last_error(comm_));
}

void NcclCommunicator::throw_if_aborted(const char* what) const {
  DSV4_CHECK(comm_ != nullptr, "NCCL {} on rank {} of {}: the communicator was aborted ({})", what, rank_, size_,
             aborted_);
}

void NcclCommunicator::settle(int result, const char* what) {
  const NcclLibrary& nccl = nccl_library();
  auto r = static_cast<ncclResult_t>(result);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  while (r == ncclInProgress && comm_ && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
    nccl.comm_get_async_error(comm_, &r);
  }
  if (r == ncclSuccess) return;
  std::string why;
  if (r == ncclInProgress) {
    why = fmt::format("not done within {} ms (a rank that never joined or failed?); the communicator is aborted",
                      timeout_.count());
  } else {
    const std::string detail = comm_ ? nccl.get_last_error(comm_) : "";
    why = fmt::format("{}{}{}", nccl.get_error_string(r), detail.empty() ? "" : ": ", detail);
  }
  const std::string message = fmt::format("NCCL {} on rank {} of {}: {}", what, rank_, size_, why);
  abort_locked(message);
  throw Error(message);
}

template <typename Call>
void NcclCommunicator::enqueue(const char* what, Call&& call) {
  std::lock_guard lock(mu_);
  if (!joined_) join_locked();
  throw_if_aborted(what);
  call(comm_, device_.stream());
  if (!device_.recording()) watchdog_->watch(what, device_.stream());
}

void NcclCommunicator::all_gather(const void* send, void* recv, size_t bytes) {
  enqueue("all_gather", [&](ncclComm* comm, cudaStream_t s) {
    settle(nccl_library().all_gather(send, recv, bytes, ncclUint8, comm, s), "all_gather");
  });
}

void NcclCommunicator::reduce_scatter(const void* send, void* recv, size_t count, DType type) {
  enqueue("reduce_scatter", [&](ncclComm* comm, cudaStream_t s) {
    settle(nccl_library().reduce_scatter(send, recv, count, nccl_type(type), ncclSum, comm, s), "reduce_scatter");
  });
}

void NcclCommunicator::all_reduce(const void* send, void* recv, size_t count, DType type) {
  enqueue("all_reduce", [&](ncclComm* comm, cudaStream_t s) {
    settle(nccl_library().all_reduce(send, recv, count, nccl_type(type), ncclSum, comm, s), "all_reduce");
  });
}

void NcclCommunicator::all_to_all(const void* send, std::span<const size_t> send_bytes, void* recv,
                                  std::span<const size_t> recv_bytes) {
  check_counts(send_bytes, recv_bytes);
  enqueue("all_to_all", [&](ncclComm* comm, cudaStream_t s) {
    const NcclLibrary& nccl = nccl_library();
    settle(nccl.group_start(), "all_to_all");
    size_t sent = 0, received = 0;
    for (size_t p = 0; p < send_bytes.size(); ++p) {
      const int peer = static_cast<int>(p);
      if (send_bytes[p]) settle(nccl.send(at(send, sent), send_bytes[p], ncclUint8, peer, comm, s), "all_to_all");
      if (recv_bytes[p]) settle(nccl.recv(at(recv, received), recv_bytes[p], ncclUint8, peer, comm, s), "all_to_all");
      sent += send_bytes[p];
      received += recv_bytes[p];
    }
    settle(nccl.group_end(), "all_to_all");
  });
}

void NcclCommunicator::broadcast(void* buf, size_t bytes, int root) {
  check_root(root);
  enqueue("broadcast", [&](ncclComm* comm, cudaStream_t s) {
    settle(nccl_library().broadcast(buf, buf, bytes, ncclUint8, root, comm, s), "broadcast");
  });
}

void NcclCommunicator::barrier() {
  all_reduce(token_, token_, 1, DType::kF32);
  device_.synchronize();
  std::lock_guard lock(mu_);
  throw_if_aborted("barrier");  // the watchdog ended a wait for a rank that never came
}

}  // namespace dsv4::cuda
