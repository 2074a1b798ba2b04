// --kv-cache-memory, --max-model-len and --block-size resolution on the CPU backend.
#include "engine/cache_sizing.h"

#include <gtest/gtest.h>

#include "backend/device.h"
#include "core/error.h"
#include "engine_test_support.h"
#include "kv/kv_pool_sizing.h"
#include "testing/error_of.h"

namespace dsv4 {
namespace {

using enginetest::tiny_config;

using ::dsv4::testing::error_of;

TEST(CacheSizing, DefaultMemoryIsAtMostFourGiBAndAQuarterOfRam) {
  const int64_t m = default_kv_cache_memory();
  EXPECT_GT(m, 0);
  EXPECT_LE(m, int64_t{4} << 30);
}

TEST(CacheSizing, DefaultMaxModelLenIsWhatFitsWithAWarning) {
  EngineConfig c;
  c.max_num_seqs = 4;
  c.kv_cache_memory = 23 << 20;  // less than the CPU default (kCpuDefaultMaxModelLen) needs
  const KvCacheSetup s = plan_kv_cache(tiny_config(), c);
  EXPECT_LT(s.max_model_len, tiny_config().max_position_embeddings);
  EXPECT_EQ(s.max_model_len, s.largest_request);
  EXPECT_LE(s.pool_bytes, c.kv_cache_memory);
  EXPECT_NE(s.warning.find("max_model_len set to " + std::to_string(s.max_model_len)), std::string::npos) << s.warning;
  // One request of that length fits the pools exactly; one more position does not.
  EXPECT_EQ(largest_request(s.layout, s.pool_pages), s.largest_request);
  c.max_model_len = s.largest_request;
  EXPECT_EQ(plan_kv_cache(tiny_config(), c).max_model_len, s.largest_request);
  EXPECT_TRUE(plan_kv_cache(tiny_config(), c).warning.empty());
  // Plenty of memory: the model's own limit, no warning.
  ModelConfig short_model = tiny_config();
  short_model.max_position_embeddings = 4096;
  c.max_model_len = 0;
  const KvCacheSetup roomy = plan_kv_cache(short_model, c);
  EXPECT_EQ(roomy.max_model_len, 4096);
  EXPECT_TRUE(roomy.warning.empty());
}

// The reserve for a step's activations against a measurement (H100, session 50, the flash-attn preset's dims):
// a prefill of 8192 tokens peaked at 1.55 GiB, and the allocator held up to 1.67 GiB beyond a step's peak.
// The reserve covers both, and stays within three times the peak (16 rows a token, the first form, took 8 GiB
// that an H100 serve never touched, while its kept experts went without).
TEST(CacheSizing, ActivationReserveCoversTheMeasuredPeakWithoutWaste) {
  ModelConfig m = tiny_config();
  m.dim = 4096, m.hc_mult = 4, m.n_heads = 64, m.head_dim = 512, m.n_activated_experts = 6, m.moe_inter_dim = 2048;
  const double gib = static_cast<double>(step_activation_reserve(m, 8192)) / (1 << 30);
  EXPECT_GE(gib, 1.55 + 1.67);
  EXPECT_LE(gib, 3 * 1.55);
  EXPECT_EQ(step_activation_reserve(m, 2048) * 4, step_activation_reserve(m, 8192));  // linear in the tokens
}

// Optional backend workspace gets only what the KV pools could never use: the spare beyond pools that
// hold max_num_seqs requests of max_model_len positions (sliding windows and retained ones included), at
// most what the backend asks; nothing where such pools would fill the spare (the model's own length when
// max_model_len is 0). What it leaves still plans those requests (an H100 serve with the first form, which
// counted one window a request, left too little for the windows of 64 sequences).
TEST(CacheSizing, OptionalWorkspaceGetsWhatTheKvPoolsCouldNeverUse) {
  ModelConfig m = tiny_config();
  m.max_position_embeddings = 1 << 20;
  EngineConfig c;
  c.max_num_seqs = 64;
  c.max_model_len = 10240;
  c.max_num_batched_tokens = 8192;
  KvPoolSizing sizing;
  sizing.max_num_seqs = 64, sizing.max_num_batched_tokens = 8192;
  const KvLayout layout = make_kv_layout(m, c.kv_dtypes);
  const int64_t full = kv_pools_bytes_for(layout, sizing, 64 * (10240 / 256 + 1));
  const int64_t extra = int64_t{3} << 20;
  const int64_t spare = full + extra;
  EXPECT_EQ(optional_workspace_grant(m, c, spare, extra / 2), extra / 2);  // all it asks
  const int64_t grant = optional_workspace_grant(m, c, spare, 5 * extra);
  EXPECT_EQ(grant, extra);  // what is left
  EngineConfig left = c;
  left.kv_cache_memory = spare - grant;
  const KvCacheSetup s = plan_kv_cache(m, left);
  EXPECT_EQ(s.max_model_len, 10240);
  EXPECT_GE(s.pool_pages.size(), 1u);
  EXPECT_GE(size_kv_pools(layout, left.kv_cache_memory, sizing).full_tokens, 64 * 10240);
  EXPECT_EQ(optional_workspace_grant(m, c, full, extra), 0);
  EXPECT_EQ(optional_workspace_grant(m, c, spare, 0), 0);
  c.max_num_seqs = 128;  // more requests take the spare
  EXPECT_EQ(optional_workspace_grant(m, c, spare, extra), 0);
  c.max_num_seqs = 64;
  c.max_model_len = 0;  // the model's million positions
  EXPECT_EQ(optional_workspace_grant(m, c, spare, extra), 0);
}

TEST(CacheSizing, CpuDefaultMaxModelLenIsWhatTheCpuServes) {
  ModelConfig long_model = tiny_config();
  long_model.max_position_embeddings = 1 << 20;
  EngineConfig c;
  c.max_num_seqs = 4;
  c.kv_cache_memory = int64_t{1} << 30;
  ASSERT_EQ(c.backend, "cpu");
  const KvCacheSetup cpu = plan_kv_cache(long_model, c);
  ASSERT_GT(cpu.largest_request, kCpuDefaultMaxModelLen);  // the cache is not the limit here
  EXPECT_EQ(cpu.max_model_len, kCpuDefaultMaxModelLen);
  EXPECT_TRUE(cpu.warning.empty());
  c.max_model_len = kCpuDefaultMaxModelLen * 2;  // an explicit value that fits is taken as it is
  EXPECT_EQ(plan_kv_cache(long_model, c).max_model_len, kCpuDefaultMaxModelLen * 2);
  c.max_model_len = 0;
  c.backend = "cuda";  // other backends keep the model's (or what fits)
  EXPECT_EQ(plan_kv_cache(long_model, c).max_model_len, std::min<int64_t>(1 << 20, cpu.largest_request));
  // A cache smaller than the CPU default still lowers it, saying why.
  c.backend = "cpu";
  c.kv_cache_memory = 23 << 20;
  const KvCacheSetup small = plan_kv_cache(long_model, c);
  ASSERT_LT(small.largest_request, kCpuDefaultMaxModelLen);
  EXPECT_EQ(small.max_model_len, small.largest_request);
  EXPECT_NE(small.warning.find("the CPU backend's default is 16384"), std::string::npos) << small.warning;
}

TEST(CacheSizing, RefusesWhatCannotFitWithTheNumbers) {
  EngineConfig c;
  c.max_num_seqs = 4;
  c.kv_cache_memory = 32 << 20;
  const int64_t fits = plan_kv_cache(tiny_config(), c).largest_request;
  c.max_model_len = fits + 1;
  const std::string e = error_of([&] { plan_kv_cache(tiny_config(), c); });
  EXPECT_NE(e.find("--max-model-len " + std::to_string(fits + 1) + " does not fit"), std::string::npos) << e;
  EXPECT_NE(e.find("at most " + std::to_string(fits) + " positions"), std::string::npos) << e;
  EXPECT_NE(e.find(std::to_string(c.kv_cache_memory)), std::string::npos) << e;
  c.max_model_len = tiny_config().max_position_embeddings + 1;
  EXPECT_NE(error_of([&] { plan_kv_cache(tiny_config(), c); }).find("exceeds the model's"), std::string::npos);
  c.max_model_len = 0;
  c.block_size = 16;
  EXPECT_NE(error_of([&] { plan_kv_cache(tiny_config(), c); }).find("--block-size 16 is not supported"),
            std::string::npos);
  c.block_size = 256;
  c.max_num_seqs = 256;
  c.kv_cache_memory = 1 << 20;
  EXPECT_NE(error_of([&] { plan_kv_cache(tiny_config(), c); }).find("lower --max-num-seqs"), std::string::npos);
}

// --max-num-batched-tokens 0: vLLM's server defaults, 8192 on a GPU of at least 70 GiB and 2048 on smaller
// ones and on the CPU; a value given passes through; a negative one is refused.
TEST(CacheSizing, MaxNumBatchedTokensDefaultsByDevice) {
  EXPECT_EQ(resolve_max_num_batched_tokens(0, int64_t{141} << 30), 8192);  // an H200
  EXPECT_EQ(resolve_max_num_batched_tokens(0, kLargeGpuBytes), 8192);
  EXPECT_EQ(resolve_max_num_batched_tokens(0, kLargeGpuBytes - 1), 2048);
  EXPECT_EQ(resolve_max_num_batched_tokens(0, int64_t{24} << 30), 2048);
  EXPECT_EQ(resolve_max_num_batched_tokens(0, 0), 2048);  // the CPU
  EXPECT_EQ(resolve_max_num_batched_tokens(512, int64_t{141} << 30), 512);
  EXPECT_EQ(resolve_max_num_batched_tokens(16384, 0), 16384);
  EXPECT_NE(error_of([] { resolve_max_num_batched_tokens(-1, 0); }).find("must not be negative"), std::string::npos);
}

// --kv-offload-bytes auto: half the host's available memory in whole MiB; sizes pass through; an unknown
// amount is an error that says what to give instead. This machine's MemAvailable is read.
TEST(CacheSizing, OffloadAutoTakesHalfTheAvailableHostMemory) {
  EXPECT_EQ(resolve_kv_offload_bytes(kKvOffloadAuto, (int64_t{10} << 30) + 12345), int64_t{5} << 30);
  EXPECT_EQ(resolve_kv_offload_bytes(int64_t{3} << 20, int64_t{10} << 30), int64_t{3} << 20);
  EXPECT_EQ(resolve_kv_offload_bytes(0, int64_t{10} << 30), 0);
  EXPECT_NE(error_of([] { resolve_kv_offload_bytes(kKvOffloadAuto, 0); }).find("give a size"), std::string::npos);
  const int64_t here = available_host_memory();
  EXPECT_GT(here, int64_t{64} << 20);
  EXPECT_LE(static_cast<uint64_t>(here), HostDevice().memory_capacity());
}

}  // namespace
}  // namespace dsv4
