// Helpers of the Communicator tests, shared by the CPU suite (host and staged communicators over
// HostDevice) and the GPU one (NCCL, staged over CudaDevice): random inputs a rank can regenerate for
// any peer, and one check per collective that runs on every rank and compares with
// a result computed here, independently of the communicators.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/comm/communicator.h"
#include "backend/device.h"
#include "core/number_formats.h"
#include "testing/host_backed_device.h"

namespace dsv4::commtest {

// A device whose memory the host may not read directly (as a GPU's): host memory underneath, so the CPU
// suite can run the staged communicator the way it runs on a GPU, where only its copies move data.
class FarDevice final : public testing::HostBackedDevice {
 public:
  FarDevice() : HostBackedDevice(false) {}
};

// Whether `text` (an error message) contains `part`, saying both when not.
inline ::testing::AssertionResult has(const std::string& text, const std::string& part) {
  if (text.find(part) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" lacks \"" << part << "\"";
}

// Rank r's input for a test: the same on every rank that asks, never zero.
inline std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(1 + rng() % 255);
  return v;
}

// Element i of an f32 or bf16 array held as bytes, as a float; put() stores one (bf16: rounded).
inline float get(const std::vector<uint8_t>& v, size_t i, DType type) {
  if (type == DType::kF32) {
    float x;
    std::memcpy(&x, v.data() + i * 4, 4);
    return x;
  }
  uint16_t b;
  std::memcpy(&b, v.data() + i * 2, 2);
  return bf16_to_float(b);
}
inline void put(std::vector<uint8_t>& v, size_t i, DType type, float x) {
  if (type == DType::kF32) {
    std::memcpy(v.data() + i * 4, &x, 4);
  } else {
    const uint16_t b = float_to_bf16(x);
    std::memcpy(v.data() + i * 2, &b, 2);
  }
}

// Random f32 or bf16 elements (as raw bytes), normal with a rank-dependent scale, never zero.
inline std::vector<uint8_t> random_elements(size_t count, DType type, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f + static_cast<float>(seed % 7));
  std::vector<uint8_t> v(count * dtype_size(type));
  for (size_t i = 0; i < count; ++i) {
    const float x = normal(rng);
    put(v, i, type, x == 0.0f ? 0.5f : x);
  }
  return v;
}

// The expected sum of element first + i over the ranks' inputs: fp32, rank order, rounded once.
inline std::vector<uint8_t> expected_sum(const std::vector<std::vector<uint8_t>>& inputs, size_t first, size_t count,
                                         DType type) {
  std::vector<uint8_t> out(count * dtype_size(type));
  for (size_t i = 0; i < count; ++i) {
    float acc = get(inputs[0], first + i, type);
    for (size_t r = 1; r < inputs.size(); ++r) acc += get(inputs[r], first + i, type);
    put(out, i, type, acc);
  }
  return out;
}

inline uint32_t seed_of(int rank, uint32_t salt) { return salt * 1000u + static_cast<uint32_t>(rank) + 1u; }

// A device buffer of `n` bytes holding `host` (or poison, 0xA5, when host is empty).
inline DeviceArray<uint8_t> on_device(Device& d, const std::vector<uint8_t>& host, size_t n) {
  return DeviceArray<uint8_t>(d, host.empty() ? std::vector<uint8_t>(n, 0xA5) : host);
}

inline void check_all_gather(Communicator& c, size_t bytes, uint32_t salt) {
  std::vector<uint8_t> want;
  for (int p = 0; p < c.size(); ++p) {
    const std::vector<uint8_t> in = random_bytes(bytes, seed_of(p, salt));
    want.insert(want.end(), in.begin(), in.end());
  }
  const auto send = on_device(c.device(), random_bytes(bytes, seed_of(c.rank(), salt)), bytes);
  auto recv = on_device(c.device(), {}, want.size());
  c.all_gather(send.data(), recv.data(), bytes);
  EXPECT_EQ(recv.to_host(), want) << "all_gather of " << bytes << " bytes, rank " << c.rank();
}

// Rank r's reduction input: `blocks` blocks of `count` elements.
inline std::vector<std::vector<uint8_t>> reduce_inputs(int size, size_t elements, DType type, uint32_t salt) {
  std::vector<std::vector<uint8_t>> in;
  for (int p = 0; p < size; ++p) in.push_back(random_elements(elements, type, seed_of(p, salt)));
  return in;
}

// Returns the rank's result (bytes), checked against the rank-order sum.
inline std::vector<uint8_t> check_all_reduce(Communicator& c, size_t count, DType type, uint32_t salt) {
  const auto in = reduce_inputs(c.size(), count, type, salt);
  const std::vector<uint8_t> want = expected_sum(in, 0, count, type);
  const auto send = on_device(c.device(), in[static_cast<size_t>(c.rank())], want.size());
  auto recv = on_device(c.device(), {}, want.size());
  c.all_reduce(send.data(), recv.data(), count, type);
  std::vector<uint8_t> got = recv.to_host();
  EXPECT_EQ(got, want) << "all_reduce of " << count << " " << dtype_name(type) << ", rank " << c.rank();
  return got;
}

inline std::vector<uint8_t> check_reduce_scatter(Communicator& c, size_t count, DType type, uint32_t salt) {
  const auto in = reduce_inputs(c.size(), count * static_cast<size_t>(c.size()), type, salt);
  const std::vector<uint8_t> want = expected_sum(in, count * static_cast<size_t>(c.rank()), count, type);
  const auto send = on_device(c.device(), in[static_cast<size_t>(c.rank())], 0);
  auto recv = on_device(c.device(), {}, want.size());
  c.reduce_scatter(send.data(), recv.data(), count, type);
  std::vector<uint8_t> got = recv.to_host();
  EXPECT_EQ(got, want) << "reduce_scatter of " << count << " " << dtype_name(type) << ", rank " << c.rank();
  return got;
}

// Bytes rank p sends rank q: uneven, zero for some pairs (and for p == q every third salt).
inline size_t a2a_bytes(int p, int q, uint32_t salt) {
  const uint32_t h = (static_cast<uint32_t>(p) * 7u + static_cast<uint32_t>(q) * 3u + salt) % 5u;
  return h == 0 ? 0 : h * 13 + static_cast<size_t>(p);
}

inline void check_all_to_all(Communicator& c, uint32_t salt) {
  const int n = c.size();
  std::vector<size_t> send_bytes, recv_bytes;
  std::vector<uint8_t> want;
  for (int p = 0; p < n; ++p) {
    send_bytes.push_back(a2a_bytes(c.rank(), p, salt));
    recv_bytes.push_back(a2a_bytes(p, c.rank(), salt));
    // Rank p's send buffer, regenerated here: its part for this rank follows the parts for ranks below.
    size_t offset = 0, total = 0;
    for (int q = 0; q < n; ++q) (q < c.rank() ? offset : total) += a2a_bytes(p, q, salt);
    const std::vector<uint8_t> theirs = random_bytes(offset + total, seed_of(p, salt));
    want.insert(want.end(), theirs.begin() + static_cast<ptrdiff_t>(offset),
                theirs.begin() + static_cast<ptrdiff_t>(offset + recv_bytes.back()));
  }
  size_t sent = 0;
  for (size_t b : send_bytes) sent += b;
  const auto send = on_device(c.device(), random_bytes(sent, seed_of(c.rank(), salt)), sent);
  auto recv = on_device(c.device(), {}, want.size());
  c.all_to_all(send.data(), send_bytes, recv.data(), recv_bytes);
  EXPECT_EQ(recv.to_host(), want) << "all_to_all, rank " << c.rank();
}

inline void check_broadcast(Communicator& c, size_t bytes, int root, uint32_t salt) {
  const std::vector<uint8_t> want = random_bytes(bytes, seed_of(root, salt));
  auto buf = on_device(c.device(), c.rank() == root ? want : random_bytes(bytes, seed_of(c.rank(), salt + 1)), bytes);
  c.broadcast(buf.data(), bytes, root);
  EXPECT_EQ(buf.to_host(), want) << "broadcast from " << root << ", rank " << c.rank();
}

}  // namespace dsv4::commtest
