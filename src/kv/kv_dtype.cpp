#include "kv/kv_dtype.h"

#include "core/error.h"
#include "core/kv_entry.h"

namespace dsv4 {
namespace {

constexpr int64_t kF32 = 4;

}  // namespace

std::string_view kv_cache_dtype_name(KvCacheDType t) { return t == KvCacheDType::kFp8 ? "fp8" : "bf16"; }

std::string_view indexer_dtype_name(IndexerDType t) {
  switch (t) {
    case IndexerDType::kFp4:
      return "fp4";
    case IndexerDType::kFp8:
      return "fp8";
    case IndexerDType::kBf16:
      return "bf16";
  }
  return "?";
}

KvDTypes parse_kv_dtypes(std::string_view cache, std::string_view indexer) {
  KvDTypes d;
  if (cache == "bf16") {
    d.cache = KvCacheDType::kBf16;
    d.indexer = IndexerDType::kBf16;
  } else if (!cache.empty() && cache != "auto" && cache != "fp8") {
    fail("--kv-cache-dtype must be one of auto, fp8, bf16; got '{}'", cache);
  }
  if (indexer == "fp4") {
    d.indexer = IndexerDType::kFp4;
  } else if (indexer == "fp8") {
    d.indexer = IndexerDType::kFp8;
  } else if (indexer == "bf16") {
    d.indexer = IndexerDType::kBf16;
  } else if (!indexer.empty() && indexer != "auto") {
    fail("--indexer-dtype must be one of auto, fp4, fp8, bf16; got '{}'", indexer);
  }
  return d;
}

int64_t attention_entry_size(const ModelConfig& c, KvCacheDType t) {
  // The byte layout itself lives with its codec (core/kv_entry.h), so the pools size exactly what
  // the backends write.
  const KvEntryDims dims{c.head_dim, c.rope_head_dim};
  if (t == KvCacheDType::kBf16) return kv_entry_bytes(KvEntryFormat::kBf16, dims);
  const int64_t n = c.nope_head_dim();
  DSV4_CHECK(n > 0 && n % 64 == 0, "FP8 KV cache: head_dim - qk_rope_head_dim = {} must be a positive multiple of 64",
             n);
  return kv_entry_bytes(KvEntryFormat::kAttnFp8, dims);
}

int64_t indexer_entry_size(const ModelConfig& c, IndexerDType t) {
  const int64_t d = c.index_head_dim;
  switch (t) {
    case IndexerDType::kFp4:
      DSV4_CHECK(d % 32 == 0, "FP4 indexer keys: index_head_dim {} must be a multiple of 32", d);
      return kv_entry_bytes(KvEntryFormat::kIndexFp4, {c.index_head_dim, 0});
    case IndexerDType::kFp8:
      return kv_entry_bytes(KvEntryFormat::kIndexFp8, {c.index_head_dim, 0});
    case IndexerDType::kBf16:
      return kv_entry_bytes(KvEntryFormat::kBf16, {c.index_head_dim, 0});
  }
  return 0;
}

int64_t c4_state_row_size(const ModelConfig& c) { return 2 * (2 * int64_t{c.head_dim}) * kF32; }
int64_t c4_index_state_row_size(const ModelConfig& c) { return 2 * (2 * int64_t{c.index_head_dim}) * kF32; }
int64_t c128_state_row_size(const ModelConfig& c) { return 2 * int64_t{c.head_dim} * kF32; }

}  // namespace dsv4
