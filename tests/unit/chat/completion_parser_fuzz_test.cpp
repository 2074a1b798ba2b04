// Random mutations of well-formed completions: the parser never throws or crashes, streaming
// agrees with one-shot, and what it returns is consistent with its input.
#include <gtest/gtest.h>

#include <random>

#include "chat/completion_parser.h"
#include "chat/special_tokens.h"
#include "parser_testing.h"

namespace dsv4::chat {
namespace {

using testing::Outcome;

const std::vector<std::string>& fragments() {
  static const std::vector<std::string> f = {"<think>",
                                             "</think>",
                                             "<｜end▁of▁sentence｜>",
                                             "<｜User｜>",
                                             "<｜",
                                             "｜>",
                                             "\n\n",
                                             "\n",
                                             "<",
                                             ">",
                                             "\"",
                                             "<｜DSML｜tool_calls>",
                                             "</｜DSML｜tool_calls>",
                                             "<｜DSML｜invoke name=\"f\">",
                                             "</｜DSML｜invoke>",
                                             "<｜DSML｜parameter name=\"p\" string=\"true\">",
                                             "<｜DSML｜parameter name=\"q\" string=\"false\">",
                                             "</｜DSML｜parameter>",
                                             "｜DSML｜",
                                             "中",
                                             "😀",
                                             "{\"a\": [1, 2]}",
                                             "text ",
                                             "true",
                                             "null"};
  return f;
}

const std::vector<std::string>& seeds() {
  static const std::vector<std::string> s = {
      "Let me think.</think>Sure.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get\">\n"
      "<｜DSML｜parameter name=\"city\" string=\"true\">Paris</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"n\" string=\"false\">[1, {\"x\": null}]</｜DSML｜parameter>\n"
      "</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜>",
      "Plain reasoning 中文</think>An answer with <b>tags</b> and 😀.<｜end▁of▁sentence｜>",
      "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n</｜DSML｜invoke>\n<｜DSML｜invoke name=\"b\">\n"
      "<｜DSML｜parameter name=\"v\" string=\"true\">x</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>",
  };
  return s;
}

std::string mutate(std::string s, std::mt19937& rng) {
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int i = 0; i < n; ++i) {
    const size_t at = s.empty() ? 0 : rng() % (s.size() + 1);
    switch (rng() % 5) {
      case 0:
        s.insert(at, fragments()[rng() % fragments().size()]);
        break;
      case 1:
        s.erase(at, rng() % 12);
        break;
      case 2:
        if (!s.empty() && at < s.size()) s[at] = static_cast<char>(rng() % 256);
        break;
      case 3:
        s.insert(at, s.substr(rng() % (s.size() + 1), rng() % 40));
        break;
      default:
        s.resize(at);
        break;
    }
  }
  return s;
}

std::vector<size_t> random_cuts(size_t size, std::mt19937& rng) {
  std::vector<size_t> cuts;
  for (size_t at = 0;;) {
    at += 1 + rng() % 16;
    if (at >= size) return cuts;
    cuts.push_back(at);
  }
}

TEST(CompletionParserFuzz, MutatedCompletions) {
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 3000; ++iter) {
    const std::string text = mutate(seeds()[rng() % seeds().size()], rng);
    ParserOptions o;
    o.thinking_mode = rng() % 2 ? ThinkingMode::kThinking : ThinkingMode::kChat;
    o.tool_call_id_prefix = "c";
    SCOPED_TRACE(text);
    const Outcome whole = testing::parse_whole(text, o);
    CompletionParser parser(o);
    parser.feed(text);
    if (parser.done()) {  // after EOS nothing more comes out
      ASSERT_TRUE(parser.feed(fragments()[rng() % fragments().size()]).empty());
      ASSERT_TRUE(parser.finish().empty());
    }
    ASSERT_EQ(testing::parse_in_pieces(text, random_cuts(text.size(), rng), o), whole) << testing::describe(whole);

    const ParsedCompletion& p = whole.parsed;
    ASSERT_LE(p.reasoning_content.size() + p.content.size(), text.size());
    if (o.thinking_mode == ThinkingMode::kChat) {
      ASSERT_TRUE(p.reasoning_content.empty());
    }
    if (text.find(kDsml) == std::string::npos) {
      ASSERT_TRUE(p.tool_calls.empty());
    }
    for (const auto& call : p.tool_calls) {
      ASSERT_FALSE(call.name.empty());
      const auto args = nlohmann::ordered_json::parse(call.arguments, nullptr, false);
      ASSERT_TRUE(args.is_object()) << call.arguments;
    }
  }
}

// Text without any '<' or newline passes through untouched, whatever the chunking.
TEST(CompletionParserFuzz, PlainTextPassesThrough) {
  std::mt19937 rng(77);
  for (int iter = 0; iter < 300; ++iter) {
    std::string text;
    const size_t n = rng() % 200;
    for (size_t i = 0; i < n; ++i) {
      char c = static_cast<char>(rng() % 256);
      if (c == '<' || c == '\n') c = 'x';
      text += c;
    }
    ParserOptions o;
    o.thinking_mode = ThinkingMode::kChat;
    ASSERT_EQ(testing::parse_in_pieces(text, random_cuts(text.size(), rng), o).parsed.content, text);
  }
}

}  // namespace
}  // namespace dsv4::chat
