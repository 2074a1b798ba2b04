// Loading tokenizer.json: the vocab-size rule, and refusals of shapes the engine does not implement.
#include <gtest/gtest.h>

#include <fstream>

#include "tokenizer_fixtures.h"

namespace dsv4 {
namespace {

using nlohmann::json;
using testing::error_of;
using testing::tiny_tokenizer_json;

std::string load_error(const json& spec) {
  return error_of([&] { Tokenizer::from_json_text(spec.dump()); });
}

json base() { return tiny_tokenizer_json({{"a", "b"}}); }

TEST(TokenizerLoad, VocabSizeIsMaxIdPlusOne) {
  // Added tokens inside the vocab range do not count twice; ids above it extend it.
  const auto tok = testing::tiny_tokenizer({{"a", "b"}}, {{"<s>", 0}, {"<x>", 300}});
  EXPECT_EQ(tok.vocab_size(), 301);
  EXPECT_EQ(tok.id_to_token(300), "<x>");
  EXPECT_EQ(tok.id_to_token(0), "<s>");  // the added token wins over the byte token with the same id
  EXPECT_EQ(tok.token_to_id("<x>"), 300);
  EXPECT_EQ(tok.token_to_id("ab"), 256);
  EXPECT_EQ(tok.token_to_id("nope"), std::nullopt);
  EXPECT_EQ(error_of([&] { tok.id_to_token(299); }), "token id 299 is not assigned to any token");
  EXPECT_EQ(error_of([&] { tok.id_to_token(301); }), "token id 301 is out of range [0, 301)");
}

TEST(TokenizerLoad, RefusesComponentsItDoesNotImplement) {
  json j = base();
  j["normalizer"] = {{"type", "NFC"}};
  EXPECT_EQ(load_error(j), R"(tokenizer.json: normalizer "NFC" is not implemented (only none or an empty Sequence))");
  j = base();
  j["decoder"] = {{"type", "WordPiece"}};
  EXPECT_EQ(load_error(j), R"(tokenizer.json: decoder "WordPiece" is not implemented (only ByteLevel))");
  j = base();
  j["model"]["type"] = "Unigram";
  EXPECT_EQ(load_error(j), R"(tokenizer.json: model has type "Unigram"; only BPE is implemented)");
  j = base();
  j["model"]["byte_fallback"] = true;
  EXPECT_EQ(load_error(j), "tokenizer.json: model.byte_fallback is not implemented");
  j = base();
  j["model"]["dropout"] = 0.1;
  EXPECT_EQ(load_error(j), "tokenizer.json: BPE dropout is not implemented");
  j = base();
  j["model"]["continuing_subword_prefix"] = "##";
  EXPECT_EQ(load_error(j), "tokenizer.json: model.continuing_subword_prefix is not implemented");
  j = base();
  j["truncation"] = {{"max_length", 8}};
  EXPECT_EQ(load_error(j), "tokenizer.json: truncation is set; it is not implemented");
}

TEST(TokenizerLoad, RefusesPreTokenizersItDoesNotImplement) {
  json j = base();
  j["pre_tokenizer"] = {{"type", "Whitespace"}};
  EXPECT_EQ(load_error(j), R"(tokenizer.json: pre_tokenizer has type "Whitespace"; implemented pre-tokenizers: )"
                           R"(Sequence, Split, ByteLevel)");
  j = base();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
  EXPECT_EQ(load_error(j), R"(tokenizer.json: pre_tokenizer.pretokenizers[0] has behavior "Removed"; only )"
                           R"("Isolated" is implemented)");
  j = base();
  j["pre_tokenizer"]["pretokenizers"][1]["invert"] = true;
  EXPECT_EQ(load_error(j), "tokenizer.json: pre_tokenizer.pretokenizers[1] is inverted; not implemented");
  j = base();
  j["pre_tokenizer"]["pretokenizers"].erase(3);
  EXPECT_EQ(load_error(j), "tokenizer.json: pre_tokenizer has no ByteLevel step; only byte-level BPE is implemented");
  j = base();
  j["pre_tokenizer"]["pretokenizers"].push_back(j["pre_tokenizer"]["pretokenizers"][0]);
  EXPECT_EQ(load_error(j),
            "tokenizer.json: pre_tokenizer.pretokenizers[4] (Split) follows ByteLevel; ByteLevel "
            "must come last");
  j = base();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = {{"Regex", "\\w+"}};
  EXPECT_NE(load_error(j).find(R"(the escape \w is not supported)"), std::string::npos);
}

TEST(TokenizerLoad, RefusesBrokenVocabularies) {
  json j = base();
  j["model"]["vocab"].erase("A");
  EXPECT_EQ(load_error(j), R"(tokenizer.json: vocab lacks the byte-level token "A" for byte 0x41; not a )"
                           R"(byte-level BPE)");
  j = base();
  j["model"]["merges"].push_back("a zz");
  EXPECT_EQ(load_error(j), R"(tokenizer.json: merge 1 uses "zz", which is not in the vocab)");
  j = base();
  j["model"]["merges"].push_back("a b c");
  EXPECT_EQ(load_error(j), R"(tokenizer.json: merge 1 ("a b c") must be two tokens separated by one space)");
  j = base();
  j["model"]["merges"].push_back(7);
  EXPECT_EQ(load_error(j), R"(tokenizer.json: merge 1 must be "a b" or ["a", "b"])");
  j = base();
  j["model"]["vocab"]["zz"] = 5;
  EXPECT_NE(load_error(j).find("tokenizer.json: vocab id 5 is used by both "), std::string::npos);
  j = base();
  j["model"]["vocab"]["zz"] = -1;
  EXPECT_EQ(load_error(j), R"(tokenizer.json: vocab entry "zz" needs an id in [0, 16777215])");
  j = base();
  j["added_tokens"] = json::array({{{"id", 300}, {"content", "<x>"}}, {{"id", 301}, {"content", "<x>"}}});
  EXPECT_EQ(load_error(j), R"(tokenizer.json: added tokens "<x>" (id 300) and "<x>" (id 301) clash)");
  EXPECT_EQ(error_of([] { Tokenizer::from_json_text("{nope", "t.json"); }),
            "t.json: not a JSON object (is it a tokenizer.json?)");
  EXPECT_EQ(error_of([] { Tokenizer::load("/nonexistent/tokenizer.json"); }),
            "cannot read tokenizer file /nonexistent/tokenizer.json");
}

TEST(TokenizerLoad, LoadsFromAFile) {
  const auto path = testing::temp_dir("tok-load") / "tokenizer.json";
  std::ofstream(path) << base().dump();
  EXPECT_EQ(Tokenizer::load(path).encode("abc"), (std::vector<int32_t>{256, 'c'}));
}

}  // namespace
}  // namespace dsv4
