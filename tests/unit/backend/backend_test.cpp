// Choosing a backend by name: cpu always, auto falls back to cpu without a GPU, unknown names and
// unavailable backends are refused with a message that says what to use instead.
#include "backend/backend.h"

#include <gtest/gtest.h>

#include <cstdlib>

#include "core/error.h"

namespace dsv4 {
namespace {

TEST(Backend, CpuIsAlwaysThere) {
  const Backend b = make_backend("cpu", 1);
  EXPECT_EQ(b.name, "cpu");
  EXPECT_TRUE(b.device->host_memory());
  EXPECT_NE(b.ops, nullptr);
  EXPECT_NE(b.description.find("1 threads"), std::string::npos);
  const auto built = built_backends();
  EXPECT_NE(std::find(built.begin(), built.end(), "cpu"), built.end());
}

TEST(Backend, AutoPicksWhatTheMachineHas) {
  const Backend b = make_backend("auto", 1);
  EXPECT_TRUE(b.name == "cpu" || b.name == "cuda");
  EXPECT_EQ(b.device->host_memory(), b.name == "cpu");
}

TEST(Backend, UnknownNamesAreRefused) {
  try {
    make_backend("tpu");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected cpu, cuda or auto"), std::string::npos) << e.what();
  }
}

// A mistyped switch fails the backend's creation instead of quietly meaning the default.
TEST(Backend, BadSwitchValuesAreRefused) {
  setenv("DSV4_GEMM_IMMA", "yes", 1);
  try {
    make_backend("cpu", 1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("DSV4_GEMM_IMMA=yes"), std::string::npos) << e.what();
  }
  unsetenv("DSV4_GEMM_IMMA");
  EXPECT_EQ(make_backend("cpu", 1).name, "cpu");
}

// The CPU backend computes the exact tier only (spec/NUMERICS.md): asked for fast it refuses, naming
// the exact tier.
TEST(Backend, CpuIsExactOnly) {
  EXPECT_EQ(make_backend("cpu", 1).numerics, Numerics::kExact);
  EXPECT_EQ(make_backend("cpu", 1, Numerics::kExact).numerics, Numerics::kExact);
  try {
    make_backend("cpu", 1, Numerics::kFast);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("exact tier only"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--numerics exact"), std::string::npos) << e.what();
  }
}

TEST(Backend, NumericsNamesParse) {
  EXPECT_EQ(parse_numerics("exact"), Numerics::kExact);
  EXPECT_EQ(parse_numerics("fast"), Numerics::kFast);
  EXPECT_EQ(parse_numerics("FAST"), std::nullopt);
  EXPECT_EQ(parse_numerics(""), std::nullopt);
  EXPECT_EQ(numerics_name(Numerics::kFast), "fast");
  EXPECT_EQ(numerics_name(Numerics::kExact), "exact");
}

TEST(Backend, CudaWithoutAGpuSaysSo) {
  try {
    const Backend b = make_backend("cuda");
    EXPECT_EQ(b.name, "cuda");  // a machine with a GPU and a CUDA build
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("backend cuda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dsv4
