// The sample op on the device against the CPU backend on fresh random logits: the V4 vocabulary and a
// small one full of exact ties, batches of 1, 8 and 64 rows, every combination of temperature, top-k,
// top-p, min-p and logprobs, with greedy rows mixed in, random edits (bias, masks, penalties) and, on
// every fifth row, a random allow-set (allowed_token_ids).
// Tokens and top ids must be identical, logprobs within ~1e-12 relative; outputs are poisoned before
// every run and each run is repeated: the second must give the same bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/gemm.h"
#include "core/error.h"
#include "gpu/gpu_test_util.h"
#include "unit/backend_cpu/sampling_test_util.h"

namespace dsv4 {
namespace {

using gputest::Dev;
using testing::SampleBatch;
using testing::SampleOut;

constexpr double kTemps[] = {0, 0.6, 1.0, 1.7};
constexpr int64_t kTopK[] = {0, 1, 20, 1000};
constexpr double kTopP[] = {1.0, 0.95, 0.5, 1e-6};
constexpr double kMinP[] = {0, 0.05, 0.5};
constexpr int32_t kLogprobs[] = {-1, 0, 5, 20};
constexpr int kCombos = 4 * 4 * 4 * 3 * 4;

// Combination c of the parameters above (mixed radix), with a fresh uniform.
SampleRow combo(int c, double u) {
  return testing::sample_row(kTemps[c % 4], kTopK[(c / 4) % 4], kTopP[(c / 16) % 4], kMinP[(c / 64) % 3], u,
                             kLogprobs[(c / 192) % 4]);
}

class CudaSampling : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dev_ = new cuda::CudaDevice(0);
    ops_ = new cuda::CudaOps(*dev_, cuda::GemmPolicy{Numerics::kExact});
  }
  static void TearDownTestSuite() {
    delete ops_;
    delete dev_;
  }

  // One device run with poisoned outputs (0xFF: token and ids −1, logprobs NaN).
  static SampleOut run_cuda(const SampleBatch& b, const Dev<float>& x) {
    SampleOut host;
    SampleParams p = b.params(host);
    Dev<int32_t> token(host.token), top_id(host.top_id);
    Dev<double> logprob(host.logprob), top_logprob(host.top_logprob);
    Dev<int64_t> rank(host.rank);
    for (auto [d, bytes] : {std::pair<void*, size_t>{token.p, token.n * 4},
                            {top_id.p, top_id.n * 4},
                            {logprob.p, logprob.n * 8},
                            {top_logprob.p, top_logprob.n * 8},
                            {rank.p, rank.n * 8}})
      DSV4_CUDA_CHECK(cudaMemset(d, 0xFF, bytes));
    DSV4_CUDA_CHECK(cudaDeviceSynchronize());  // the op runs on the device's own (non-blocking) stream
    p.x = x.p;
    p.token = token.p;
    p.logprob = logprob.p;
    p.top_id = top_id.p;
    p.top_logprob = top_logprob.p;
    p.rank = rank.p;
    ops_->sample(p);
    dev_->synchronize();
    return {token.get(), top_id.get(), logprob.get(), top_logprob.get(), rank.get()};
  }

  // The CUDA op twice (same bits) against the CPU op.
  void expect_matches_cpu(const SampleBatch& b, const char* what) {
    SCOPED_TRACE(what);
    const size_t n = b.rows.size(), w = static_cast<size_t>(b.top_width);
    SampleOut want;
    cpu_.sample(b.params(want));
    const Dev<float> x(b.x);
    const SampleOut got = run_cuda(b, x), again = run_cuda(b, x);
    EXPECT_EQ(again.token, got.token) << "not reproducible run to run";
    EXPECT_EQ(again.top_id, got.top_id) << "not reproducible run to run";
    EXPECT_EQ(again.rank, got.rank) << "not reproducible run to run";
    EXPECT_EQ(std::memcmp(again.logprob.data(), got.logprob.data(), n * 8), 0) << "not reproducible run to run";
    EXPECT_EQ(std::memcmp(again.top_logprob.data(), got.top_logprob.data(), n * w * 8), 0)
        << "not reproducible run to run";
    const auto near = [](double g, double r) {
      return g == r || std::fabs(g - r) <= 1e-12 * std::max(1.0, std::fabs(r));
    };
    int bad = 0;
    for (size_t r = 0; r < n && bad < 10; ++r) {
      const SampleRow& row = b.rows[r];
      bool ok = got.token[r] == want.token[r] && near(got.logprob[r], want.logprob[r]) && got.rank[r] == want.rank[r];
      for (size_t j = 0; j < w; ++j)
        ok = ok && got.top_id[r * w + j] == want.top_id[r * w + j] &&
             near(got.top_logprob[r * w + j], want.top_logprob[r * w + j]);
      if (!ok) {
        ++bad;
        ADD_FAILURE() << "row " << r << " (T " << row.temperature << ", k " << row.top_k << ", p " << row.top_p
                      << ", min_p " << row.min_p << ", u " << row.u << ", logprobs " << row.logprobs << ", allow-set "
                      << row.allow_row << ", edits " << row.edit_end - row.edit_begin << "): token " << got.token[r]
                      << " vs cpu " << want.token[r] << ", logprob " << got.logprob[r] << " vs " << want.logprob[r]
                      << ", rank " << got.rank[r] << " vs " << want.rank[r] << ", force_id " << row.force_id;
      }
    }
  }

  // `rows` rows over [cols] logits (limit = cols − cut) whose parameters run through every
  // combination, starting at `first`; with `ties`, logits from four values only.
  static SampleBatch batch(int rows, int first, int64_t cols, int64_t cut, std::mt19937& rng, bool ties) {
    SampleBatch b;
    b.cols = cols;
    b.limit = cols - cut;
    b.top_width = kSampleMaxLogprobs;
    std::uniform_real_distribution<double> u(0, 1);
    for (int r = 0; r < rows; ++r) {
      SampleRow row = combo((first + r) % kCombos, u(rng));
      const int edits = rng() % 4 == 0 ? 0 : static_cast<int>(rng() % 300);
      b.add_random_edits(row, rng, edits);
      if (r % 5 == 2) b.add_random_allow(row, rng, r % 2 ? 0.002 : 0.5);
      // Every seventh row a scored prompt token (force_id): its edits, allow-set and temperature ignored.
      if (r % 7 == 3) row.force_id = static_cast<int32_t>(rng() % static_cast<uint32_t>(b.limit));
      b.rows.push_back(row);
    }
    b.x.resize(b.rows.size() * static_cast<size_t>(cols));
    if (ties) {
      for (auto& v : b.x) v = static_cast<float>(rng() % 4) * 0.5f;
    } else {
      std::normal_distribution<float> d(0, 3);
      for (auto& v : b.x) v = d(rng);
      b.x[static_cast<size_t>(cols - 1)] = 1e4f;  // past the limit (when cut > 0): never chosen
    }
    return b;
  }

  // Batches of 1, 8 and 64 rows through every combination of the parameters.
  void sweep(int64_t cols, int64_t cut, bool ties, uint32_t seed) {
    std::mt19937 rng(seed);
    expect_matches_cpu(batch(1, 7, cols, 0, rng, ties), "batch 1");
    expect_matches_cpu(batch(8, 100, cols, cut, rng, ties), "batch 8");
    for (int first = 0; first < kCombos; first += 64)
      expect_matches_cpu(batch(64, first, cols, first % 128 == 0 ? 0 : cut, rng, ties), "batch 64");
  }

  static cuda::CudaDevice* dev_;
  static cuda::CudaOps* ops_;
  CpuOps cpu_{4};
};

cuda::CudaDevice* CudaSampling::dev_ = nullptr;
cuda::CudaOps* CudaSampling::ops_ = nullptr;

TEST_F(CudaSampling, V4VocabularyMatchesCpu) { sweep(129280, 465, false, 201); }

TEST_F(CudaSampling, SmallVocabularyWithTiesMatchesCpu) { sweep(97, 5, true, 202); }

// Peaked and flat rows: nearly all mass on one id, and thousands of ids within a factor of two
// (the radix select's boundary buckets then hold many elements).
TEST_F(CudaSampling, PeakedAndFlatRowsMatchCpu) {
  std::mt19937 rng(203);
  SampleBatch b = batch(64, 0, 129280, 0, rng, false);
  for (size_t r = 0; r < b.rows.size(); ++r) {
    float* x = b.x.data() + r * 129280;
    if (r % 2 == 0) {
      x[rng() % 129280] = 60.0f;
    } else {
      for (size_t i = 0; i < 129280; ++i) x[i] = 0.001f * static_cast<float>(rng() % 700);
    }
  }
  expect_matches_cpu(b, "peaked / flat");
}

// Rows masked down to one id, and rows whose every id is masked.
TEST_F(CudaSampling, MaskedRowsMatchCpu) {
  std::mt19937 rng(204);
  SampleBatch b = batch(8, 0, 4096, 0, rng, false);
  b.edits.clear();
  for (size_t r = 0; r < b.rows.size(); ++r) {
    SampleRow& row = b.rows[r];
    row.temperature = r % 2 ? 1.0 : 0.0;
    row.edit_begin = static_cast<int32_t>(b.edits.size());
    for (int32_t id = 0; id < 4096; ++id)
      if (r >= 4 || id != static_cast<int32_t>(100 * r + 3)) b.edits.push_back({.id = id, .mask = true});
    row.edit_end = static_cast<int32_t>(b.edits.size());
  }
  expect_matches_cpu(b, "masked");
}

TEST_F(CudaSampling, BadParametersThrowBeforeLaunch) {
  SampleBatch b;
  b.cols = b.limit = 16;
  b.x.assign(16, 0.0f);
  b.rows = {combo(1, 0.5)};
  b.rows[0].top_p = 0;
  const Dev<float> x(b.x);
  Dev<int32_t> token(std::vector<int32_t>{-7});
  SampleOut o;
  SampleParams p = b.params(o);
  p.x = x.p;
  p.token = token.p;
  p.logprob = nullptr;
  EXPECT_THROW(ops_->sample(p), Error);
  EXPECT_EQ(token.get()[0], -7);
}

}  // namespace
}  // namespace dsv4
