// The BPE model of a byte-level tokenizer.json: vocabulary (byte-level strings -> ids) and ranked merges.
// A word is split into its bytes, then the lowest-ranked adjacent pair is merged first (leftmost on ties),
// exactly as HF tokenizers' BPE does it. Results are memoised per word (WordCache).
#pragma once

#include <array>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/merge_table.h"
#include "tokenizer/word_cache.h"

namespace dsv4 {

class BpeModel {
 public:
  // `spec` is tokenizer.json's "model" value; options this engine does not implement are refused.
  static BpeModel from_json(const nlohmann::json& spec);

  // Appends the ids of one pre-tokenized piece, given as raw bytes.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out) const;

  // Byte-level token text -> id, as listed in the file.
  const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
  size_t merge_count() const { return merge_count_; }

 private:
  BpeModel() = default;
  void parse_vocab(const nlohmann::json& vocab);
  void parse_merges(const nlohmann::json& merges);
  int32_t id_of(const std::string& token, size_t merge_index) const;
  // The uncached merge loop.
  void merge(std::string_view piece, std::vector<int32_t>& out) const;

  std::unordered_map<std::string, int32_t> vocab_;
  std::array<int32_t, 256> byte_ids_{};
  MergeTable merges_;
  size_t merge_count_ = 0;
  bool ignore_merges_ = false;
  std::unique_ptr<WordCache> cache_ = std::make_unique<WordCache>();
};

}  // namespace dsv4
