#include "core/vllm_buckets.h"

#include <array>

namespace dsv4::vllm_buckets {
namespace {

constexpr std::array<double, 22> kTtft = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
constexpr std::array<double, 19> kInterToken = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                                0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
constexpr std::array<double, 21> kRequestLatency = {0.3,  0.5,   0.8,   1.0,   1.5,   2.0,    2.5,
                                                    5.0,  10.0,  15.0,  20.0,  30.0,  40.0,   50.0,
                                                    60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
constexpr std::array<double, 13> kIterationTokens = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
constexpr std::array<double, 5> kParamsN = {1, 2, 5, 10, 20};

}  // namespace

std::span<const double> ttft() { return kTtft; }
std::span<const double> inter_token() { return kInterToken; }
std::span<const double> request_latency() { return kRequestLatency; }
std::span<const double> iteration_tokens() { return kIterationTokens; }
std::span<const double> params_n() { return kParamsN; }

std::vector<double> one_two_five(int64_t max_value) {
  std::vector<double> out;
  for (int64_t scale = 1; scale <= max_value; scale *= 10) {
    for (const int64_t m : {1, 2, 5}) {
      if (m * scale > max_value) return out;
      out.push_back(static_cast<double>(m * scale));
    }
  }
  return out;
}

}  // namespace dsv4::vllm_buckets
