// Element formats of the KV cache and the bytes of one stored entry (MODEL.md §9.4, §10; SERVING.md §1).
// kv/ only sizes entries; the byte codecs live in core/kv_entry.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/model_config.h"

namespace dsv4 {

// Attention entries (window tokens and compressed entries): FP8 = [n e4m3][r bf16][n/64 ue8m0][pad to 8],
// which holds exactly the values the reference computes; bf16 = head_dim bf16 values.
enum class KvCacheDType : uint8_t { kFp8, kBf16 };
// Indexer keys: FP4 = [c/2 packed e2m1][c/32 ue8m0] (the reference's grid); FP8 = [c e4m3][fp32 scale]; bf16.
enum class IndexerDType : uint8_t { kFp4, kFp8, kBf16 };

struct KvDTypes {
  KvCacheDType cache = KvCacheDType::kFp8;
  IndexerDType indexer = IndexerDType::kFp4;
};

std::string_view kv_cache_dtype_name(KvCacheDType t);
std::string_view indexer_dtype_name(IndexerDType t);

// Parses the command-line names ("auto" or "" = the default). Throws dsv4::Error listing the choices.
// A bf16 cache implies a bf16 indexer unless the indexer dtype is given.
KvDTypes parse_kv_dtypes(std::string_view cache, std::string_view indexer);

// Bytes of one attention entry (one layer, one token or one compressed entry), padding included.
int64_t attention_entry_size(const ModelConfig& c, KvCacheDType t);
// Bytes of one indexer key.
int64_t indexer_entry_size(const ModelConfig& c, IndexerDType t);
// fp32 compressor residual rows of one token position, kv and score halves together:
// ratio 4 (overlap) attention 2·(2·head_dim)·4, its indexer 2·(2·index_head_dim)·4, ratio 128 2·head_dim·4.
int64_t c4_state_row_size(const ModelConfig& c);
int64_t c4_index_state_row_size(const ModelConfig& c);
int64_t c128_state_row_size(const ModelConfig& c);

}  // namespace dsv4
