// Decode steps through CUDA graphs on the H200: replayed steps give the padded eager steps' logits bit
// for bit, the indexer on the side stream changes no bit, and the CUDA steps match the CPU backend's;
// the device refuses host work while recording; the side stream is ordered as promised.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/launch.cuh"
#include "core/error.h"
#include "gpu/gpu_test_util.h"
#include "model/model.h"
#include "model/step_graphs.h"
#include "testing/decode_steps.h"
#include "testing/tiny_model.h"

namespace dsv4 {
namespace {

const LoadedModel& tiny() { return testing::tiny_model(17); }

// Five sequences around compression boundaries, batch 8 then 4 (see the CPU Equivalence test).
const testing::DecodeRun kRun{{125, 3, 250, 60, 131}, 24, 5};

struct CudaRun {
  std::vector<std::vector<float>> logits;
  StepGraphStats stats;
};

CudaRun cuda_steps(StepMode mode, bool overlap, bool shared_overlap = false) {
  cuda::CudaDevice dev;
  cuda::CudaOps ops(dev, cuda::GemmPolicy{Numerics::kExact});
  Model m(tiny().config, tiny().weights, ops, dev);
  m.set_step_mode(mode);
  m.set_overlap(overlap);
  m.set_shared_overlap(shared_overlap);
  CudaRun r;
  r.logits = testing::decode_steps(m, &dev, kRun);
  r.stats = m.graph_stats();
  return r;
}

// Decode steps were recorded and replayed, none failed.
void expect_replayed(const CudaRun& graphs) {
  EXPECT_GT(graphs.stats.replayed, 0) << "nothing was replayed";
  EXPECT_EQ(graphs.stats.failed, 0);
}

// Every step's logits of two runs, bit for bit.
void expect_same_logits(const CudaRun& a, const CudaRun& b, const char* what) {
  ASSERT_EQ(a.logits.size(), b.logits.size()) << what;
  for (size_t k = 0; k < a.logits.size(); ++k)
    EXPECT_EQ(a.logits[k], b.logits[k]) << "step " << k << " (" << what << ")";
}

TEST(CudaStepGraphs, ReplayedDecodeStepsMatchEagerSteps) {
  const CudaRun graphs = cuda_steps(StepMode::kGraphs, true);
  expect_replayed(graphs);
  const CudaRun padded = cuda_steps(StepMode::kPadded, true);
  const CudaRun eager = cuda_steps(StepMode::kEager, true);
  const CudaRun serial = cuda_steps(StepMode::kEager, false);
  ASSERT_EQ(graphs.logits.size(), padded.logits.size());
  for (size_t k = 0; k < padded.logits.size(); ++k) {
    EXPECT_EQ(graphs.logits[k], padded.logits[k]) << "step " << k;
    EXPECT_EQ(eager.logits[k], serial.logits[k]) << "step " << k << ": the side stream changed a bit";
    EXPECT_LT(gputest::normalized_error(padded.logits[k], eager.logits[k]), 1e-3) << "step " << k;
  }
  // The CPU backend's padded steps (bit-identical to its eager ones).
  CpuOps cpu_ops(0);
  HostDevice host;
  Model cpu(tiny().config, tiny().weights, cpu_ops, host);
  cpu.set_step_mode(StepMode::kPadded);
  const auto want = testing::decode_steps(cpu, nullptr, kRun);
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_LT(gputest::normalized_error(graphs.logits[k], want[k]), 1e-3) << "step " << k;
}

// The MoE's shared expert on the side stream (DSV4_MOE_SIDE), recorded and eager: the same bits as
// with it inside moe_experts.
TEST(CudaStepGraphs, TheSharedExpertOnTheSideStreamChangesNoBit) {
  const CudaRun graphs = cuda_steps(StepMode::kGraphs, true, true);
  expect_replayed(graphs);
  expect_same_logits(graphs, cuda_steps(StepMode::kGraphs, true, false), "recorded");
  expect_same_logits(cuda_steps(StepMode::kEager, true, true), cuda_steps(StepMode::kEager, true, false), "eager");
}

TEST(CudaStepGraphs, HostWorkIsRefusedWhileRecording) {
  cuda::CudaDevice dev;
  DeviceArray<float> a(dev, std::vector<float>(256, 1.5f));
  std::vector<float> h(256);
  dev.begin_recording();
  EXPECT_THROW(dev.to_host(h.data(), a.data(), 1024), Error);
  EXPECT_THROW(dev.to_device(a.data(), h.data(), 1024), Error);
  EXPECT_THROW(dev.synchronize(), Error);
  EXPECT_THROW(dev.mark(), Error);
  {
    DeviceArray<float> inside(dev, 256);  // taken and freed inside the recording
    dev.copy(inside.data(), a.data(), 1024);
  }
  auto rec = dev.end_recording();
  dev.replay(*rec);
  dev.synchronize();
  dev.begin_recording();
  DeviceArray<float> kept(dev, 64);  // outlives the recording: refused at its end
  EXPECT_THROW(dev.end_recording(), Error);
  kept = DeviceArray<float>();
  dev.to_host(h.data(), a.data(), 1024);  // the device runs eagerly again
  EXPECT_EQ(h[17], 1.5f);
  // A failure inside a side branch of a recording: aborting leaves both streams usable.
  dev.begin_recording();
  dev.begin_side();
  EXPECT_THROW(dev.to_host(h.data(), a.data(), 1024), Error);
  dev.abort_recording();
  DeviceArray<float> b(dev, 256);
  dev.begin_side();
  dev.copy(b.data(), a.data(), 1024);
  dev.end_side();
  dev.join_side();
  std::fill(h.begin(), h.end(), 0.0f);
  dev.to_host(h.data(), b.data(), 1024);
  EXPECT_EQ(h[200], 1.5f);
}

TEST(CudaSideQueue, SideWorkRunsAfterWhatCameBeforeAndJoinsBeforeWhatComesAfter) {
  cuda::CudaDevice dev;
  constexpr size_t n = size_t{64} << 20;  // 256 MiB: copies long enough to overlap if misordered
  std::vector<float> x(n / 4, 3.0f), y(n / 4, 7.0f);
  DeviceArray<float> a(dev, n / 4), b(dev, n / 4), c(dev, n / 4), src_x(dev, x), src_y(dev, y);
  dev.synchronize();
  for (int round = 0; round < 3; ++round) {
    dev.copy(a.data(), src_x.data(), n);  // main: a = x
    dev.begin_side();
    dev.copy(b.data(), a.data(), n);  // side: b = a (must see x)
    dev.end_side();
    dev.join_side();
    dev.copy(c.data(), b.data(), n);      // main, after the join: c = b
    dev.copy(a.data(), src_y.data(), n);  // main: a = y, after the side copy read it
    std::vector<float> got(n / 4);
    dev.to_host(got.data(), c.data(), n);
    EXPECT_EQ(got.front(), 3.0f);
    EXPECT_EQ(got.back(), 3.0f);
    EXPECT_EQ(got[n / 8], 3.0f);
  }
}

}  // namespace
}  // namespace dsv4
