#include "engine/cache_sizing.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>

#include "core/error.h"
#include "kv/kv_pool_sizing.h"

namespace dsv4 {
namespace {

bool fits(const KvLayout& layout, std::span<const int64_t> pool_pages, int64_t tokens) {
  std::vector<int64_t> need(pool_pages.size(), 0);
  for (const KvUnit& u : layout.units) need[static_cast<size_t>(u.bucket)] += u.pages_for(tokens) * u.num_layers();
  for (size_t b = 0; b < need.size(); ++b) {
    if (need[b] > pool_pages[b]) return false;
  }
  return true;
}

std::string gib(int64_t bytes) { return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1 << 30)); }

// The pools' serving limits (the engine resolves max_num_batched_tokens by its device before planning;
// alone, planning takes the CPU's default).
KvPoolSizing pool_sizing(const EngineConfig& c) {
  KvPoolSizing s;
  s.max_num_seqs = c.max_num_seqs;
  s.max_num_batched_tokens = resolve_max_num_batched_tokens(c.max_num_batched_tokens, 0);
  return s;
}

}  // namespace

int64_t default_kv_cache_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const int64_t ram = pages > 0 && page > 0 ? int64_t{pages} * page : int64_t{16} << 30;
  return std::min(int64_t{4} << 30, ram / 4);
}

int64_t largest_request(const KvLayout& layout, std::span<const int64_t> pool_pages) {
  // Full units need one page per 256 positions, so no request is longer than 256 x (most pages + 1).
  int64_t hi = 1;
  for (int64_t p : pool_pages) hi = std::max(hi, (p + 1) * kKvBlockTokens + 1);
  int64_t lo = 0;  // fits (trivially); hi does not
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (fits(layout, pool_pages, mid) ? lo : hi) = mid;
  }
  return lo;
}

int64_t resolve_kv_offload_bytes(int64_t requested, int64_t available) {
  if (requested != kKvOffloadAuto) return requested;
  DSV4_CHECK(available > 0, "--kv-offload-bytes auto: the host's available memory is unknown; give a size");
  return available / 2 / (int64_t{1} << 20) * (int64_t{1} << 20);
}

int64_t resolve_max_num_batched_tokens(int64_t requested, int64_t gpu_bytes) {
  DSV4_CHECK(requested >= 0, "--max-num-batched-tokens must not be negative, got {}", requested);
  if (requested > 0) return requested;
  return gpu_bytes >= kLargeGpuBytes ? 8192 : SchedulerConfig{}.max_num_batched_tokens;
}

int64_t available_host_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

int64_t step_activation_reserve(const ModelConfig& m, int64_t tokens) {
  const int64_t widest =
      std::max<int64_t>({m.hc_dim(), int64_t{m.n_heads} * m.head_dim, m.n_activated_experts * m.moe_inter_dim * 2});
  // Eight rows of the widest bf16 tensor a token. Measured (bench step, H100, the flash-attn preset): a
  // prefill of 8192 tokens peaked at 1.55 GiB (about 3.1 such rows a token), the allocator holding 0.04-1.67
  // GiB more after other steps; 16 rows a token left ~12 GiB of an H100 serve's plan untouched.
  return 8 * tokens * widest * 2;
}

int64_t request_kv_bytes(const KvLayout& layout, int64_t tokens) {
  int64_t bytes = 0;
  for (int u = 0; u < static_cast<int>(layout.units.size()); ++u) bytes += layout.allocated_bytes(u, tokens);
  return bytes;
}

int64_t optional_workspace_grant(const ModelConfig& model, const EngineConfig& c, int64_t spare, int64_t wanted) {
  if (wanted <= 0 || spare <= 0) return 0;
  const int64_t len = c.max_model_len > 0 ? c.max_model_len : model.max_position_embeddings;
  // Every request's blocks (one partly filled each), beside the sliding windows the split reserves.
  const int64_t blocks = c.max_num_seqs * ((len + kKvBlockTokens - 1) / kKvBlockTokens + 1);
  const int64_t full = kv_pools_bytes_for(make_kv_layout(model, c.kv_dtypes), pool_sizing(c), blocks);
  return full >= spare ? 0 : std::min(wanted, spare - full);
}

KvCacheSetup plan_kv_cache(const ModelConfig& model, const EngineConfig& c) {
  DSV4_CHECK(c.block_size == kKvBlockTokens, "--block-size {} is not supported: the KV cache uses blocks of {}",
             c.block_size, kKvBlockTokens);
  DSV4_CHECK(c.kv_cache_memory >= 0, "--kv-cache-memory must not be negative, got {}", c.kv_cache_memory);
  DSV4_CHECK(c.max_model_len >= 0, "--max-model-len must not be negative, got {}", c.max_model_len);
  DSV4_CHECK(c.kv_offload_bytes >= 0, "--kv-offload-bytes must not be negative, got {}", c.kv_offload_bytes);
  KvCacheSetup s;
  s.layout = make_kv_layout(model, c.kv_dtypes);
  s.kv_cache_memory = c.kv_cache_memory > 0 ? c.kv_cache_memory : default_kv_cache_memory();
  const KvPoolSizing sizing = pool_sizing(c);
  KvPoolSplit split;
  try {
    split = size_kv_pools(s.layout, s.kv_cache_memory, sizing);
  } catch (const Error& e) {
    fail("{}; raise --kv-cache-memory or lower --max-num-seqs ({}) or --max-num-batched-tokens ({})", e.what(),
         c.max_num_seqs, sizing.max_num_batched_tokens);
  }
  s.pool_pages = split.pages;
  s.pool_bytes = split.bytes;
  s.largest_request = largest_request(s.layout, s.pool_pages);
  if (c.kv_offload_bytes > 0) {
    s.host_tier_tokens =
        largest_request(s.layout, host_tier_pages(s.layout, c.kv_offload_bytes, c.prefix_cache_retention_interval));
  }
  const int64_t model_len = model.max_position_embeddings;
  DSV4_CHECK(s.largest_request > 0, "--kv-cache-memory {} ({}) cannot hold a single request", s.kv_cache_memory,
             gib(s.kv_cache_memory));
  if (c.max_model_len == 0) {
    const int64_t wanted = c.backend == "cpu" ? std::min(model_len, kCpuDefaultMaxModelLen) : model_len;
    s.max_model_len = std::min(wanted, s.largest_request);
    if (s.max_model_len < wanted) {
      s.warning = fmt::format(
          "max_model_len set to {} ({} {}): one request of {} positions needs {} B ({}) of KV cache; "
          "--kv-cache-memory {} ({}) gives pools of {} B (sliding windows for --max-num-seqs {} requests included), "
          "which hold at most {} positions for one request",
          s.max_model_len, wanted == model_len ? "the model allows" : "the CPU backend's default is", wanted, wanted,
          request_kv_bytes(s.layout, wanted), gib(request_kv_bytes(s.layout, wanted)), s.kv_cache_memory,
          gib(s.kv_cache_memory), s.pool_bytes, c.max_num_seqs, s.largest_request);
    }
    return s;
  }
  DSV4_CHECK(c.max_model_len <= model_len, "--max-model-len {} exceeds the model's max_position_embeddings {}",
             c.max_model_len, model_len);
  DSV4_CHECK(c.max_model_len <= s.largest_request,
             "--max-model-len {} does not fit the KV cache: one request of {} positions needs {} B ({}), but "
             "--kv-cache-memory {} ({}) gives pools of {} B (sliding windows for --max-num-seqs {} requests included), "
             "which hold at most {} positions for one request; raise --kv-cache-memory or lower --max-model-len (or "
             "--max-num-seqs)",
             c.max_model_len, c.max_model_len, request_kv_bytes(s.layout, c.max_model_len),
             gib(request_kv_bytes(s.layout, c.max_model_len)), s.kv_cache_memory, gib(s.kv_cache_memory), s.pool_bytes,
             c.max_num_seqs, s.largest_request);
  s.max_model_len = c.max_model_len;
  return s;
}

}  // namespace dsv4
