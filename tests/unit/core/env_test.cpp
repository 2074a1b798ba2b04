#include "core/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace dsv4 {
namespace {

// Sets a variable for one scope and restores what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_) {
      setenv(name_, old_.c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

std::string switch_error() {
  try {
    check_env_switches();
  } catch (const Error& e) {
    return e.what();
  }
  return {};
}

TEST(EnvSwitches, KnownValuesAndEmptyPass) {
  const ScopedEnv a("DSV4_GEMM_IMMA", "0"), b("DSV4_GEMM_CUBLASLT", "0"), c("DSV4_INDEXER_DOTS", "mma"),
      d("DSV4_MOE_SIDE", "");
  EXPECT_EQ(switch_error(), "");
}

TEST(EnvSwitches, AnUnknownValueNamesTheSwitchAndWhatItTakes) {
  const ScopedEnv a("DSV4_GEMM_CUBLASLT", "off");
  EXPECT_EQ(switch_error(), "DSV4_GEMM_CUBLASLT=off: expected 0 or 1 (or unset)");
}

TEST(EnvSwitches, ModeSwitchesListTheirModes) {
  const ScopedEnv a("DSV4_INDEXER_DOTS", "tensor");
  EXPECT_EQ(switch_error(), "DSV4_INDEXER_DOTS=tensor: expected cuda-cores or mma or wgmma (or unset)");
}

// A switch that was replaced says by what, instead of being ignored.
TEST(EnvSwitches, RetiredSwitchesNameTheirReplacement) {
  {
    const ScopedEnv a("DSV4_GEMM", "cublaslt");
    EXPECT_EQ(switch_error(), "DSV4_GEMM is no longer read: use --numerics fast or exact (DSV4_NUMERICS)");
  }
  const ScopedEnv b("DSV4_GEMM_RING", "0");
  EXPECT_NE(switch_error().find("DSV4_GEMM_RING is no longer read: the kernel it switched is always taken"),
            std::string::npos);
}

TEST(EnvSwitches, ReadingOneChecksItsValue) {
  {
    const ScopedEnv a("DSV4_INDEXER_DOTS", "wgmma");
    EXPECT_EQ(env_switch("DSV4_INDEXER_DOTS"), "wgmma");
  }
  const ScopedEnv b("DSV4_INDEXER_DOTS", "3");
  EXPECT_THROW(env_switch("DSV4_INDEXER_DOTS"), Error);
}

TEST(EnvSwitches, ReadingAnUnlistedNameIsAnError) { EXPECT_THROW(env_switch("DSV4_NOT_A_SWITCH"), Error); }

TEST(EnvSwitches, OtherVariablesAreNotChecked) {
  const ScopedEnv a("DSV4_HOME", "/tmp/anything"), b("DSV4_GEMM_IMMA_MIN_ROWS", "12");
  EXPECT_EQ(switch_error(), "");
}

}  // namespace
}  // namespace dsv4
