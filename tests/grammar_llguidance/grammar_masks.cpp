// grammar_masks: our token masks along token sequences, for test_llguidance_masks.py to compare with
// llguidance's. Reads JSON lines on stdin, answers one JSON line each:
//   {"vocab": true}  ->  {"eos": id, "tokens": [hex bytes per id], "special": [ids]}
//     (the grammar vocabulary's bytes; a special token's own text, so llguidance can name it)
//   {"kind": "json_schema" | "regex", "grammar": schema object or regex text}  ->  {"mask": hex words}
//     starts a walk: the mask at its start, ceil(vocab / 32) 32-bit words, each as 8 hex digits
//   {"advance": id}  ->  {"ok": bool, "mask": hex words}: the walk moves past the token (when the grammar
//     allows it) and answers the mask there
//   A grammar the compiler refuses answers {"error": "..."}.
// Usage: grammar_masks [tokenizer.json] (default: the one dsv4 serve would find).
#include <fmt/format.h>

#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "server/grammar_cache.h"
#include "tokenizer/tokenizer_locator.h"

namespace {

using Json = nlohmann::ordered_json;
using namespace dsv4;

constexpr int32_t kEos = 1;  // V4's end of sentence

std::string hex_bytes(std::string_view b) {
  std::string out;
  for (char c : b) out += fmt::format("{:02x}", static_cast<uint8_t>(c));
  return out;
}

std::string hex_words(std::span<const uint32_t> words) {
  std::string out;
  out.reserve(words.size() * 8);
  for (uint32_t w : words) out += fmt::format("{:08x}", w);
  return out;
}

Json vocab_answer(const Tokenizer& tok, const grammar::Vocabulary& v) {
  Json tokens = Json::array(), special = Json::array();
  for (int32_t id = 0; id < tok.vocab_size(); ++id) {
    const bool named = tok.is_special(id) || v.bytes[static_cast<size_t>(id)].empty();
    tokens.push_back(hex_bytes(named ? tok.id_to_token(id) : std::string_view(v.bytes[static_cast<size_t>(id)])));
    if (named) special.push_back(id);
  }
  return Json{{"eos", v.eos}, {"tokens", tokens}, {"special", special}};
}

grammar::Grammar grammar_of(const Json& q) {
  const std::string kind = q.at("kind");
  if (kind == "json_schema") return grammar::json_schema_grammar(q.at("grammar"));
  if (kind == "regex") return grammar::regex_grammar(q.at("grammar").get<std::string>());
  dsv4::fail("grammar_masks: unknown kind \"{}\"", kind);
}

// The walk in progress.
struct Walk {
  std::shared_ptr<const grammar::CompiledGrammar> grammar;
  std::unique_ptr<grammar::Matcher> matcher;

  Json start(const Json& q, const std::shared_ptr<const grammar::TokenTrie>& trie) {
    grammar = std::make_shared<const grammar::CompiledGrammar>(grammar_of(q), trie);
    matcher = std::make_unique<grammar::Matcher>(grammar);
    return Json{{"mask", hex_words(matcher->mask())}};
  }
  Json advance(int32_t token) {
    DSV4_CHECK(matcher != nullptr, "grammar_masks: advance before a walk started");
    const bool ok = matcher->accept(token);
    return Json{{"ok", ok}, {"mask", hex_words(matcher->mask())}};
  }
};

}  // namespace

int main(int argc, char** argv) {
  const Tokenizer tok = Tokenizer::load(locate_tokenizer(TokenizerSearch::from_environment(argc > 1 ? argv[1] : "")));
  const grammar::Vocabulary vocab = server::grammar_vocabulary(tok, kEos);
  const auto trie = std::make_shared<const grammar::TokenTrie>(vocab);
  Walk walk;
  std::string line;
  while (std::getline(std::cin, line)) {
    const Json q = Json::parse(line);
    Json answer;
    try {
      if (q.value("vocab", false)) {
        answer = vocab_answer(tok, vocab);
      } else if (q.contains("advance")) {
        answer = walk.advance(q["advance"].get<int32_t>());
      } else {
        answer = walk.start(q, trie);
      }
    } catch (const Error& e) {
      answer = Json{{"error", e.what()}};
    }
    std::cout << answer.dump() << '\n' << std::flush;
  }
  return 0;
}
