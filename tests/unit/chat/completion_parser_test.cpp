// The completion parser: reasoning, content and DSML tool calls, one-shot and streaming.
#include "chat/completion_parser.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "chat/special_tokens.h"
#include "parser_testing.h"
#include "testing/paths.h"

namespace dsv4::chat {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;
using testing::describe;
using testing::Outcome;
using testing::parse_in_pieces;
using testing::parse_whole;

ParserOptions thinking() {
  ParserOptions o;
  o.thinking_mode = ThinkingMode::kThinking;
  o.tool_call_id_prefix = "call_";
  return o;
}

ParserOptions chat() {
  ParserOptions o = thinking();
  o.thinking_mode = ThinkingMode::kChat;
  return o;
}

std::string cat(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (auto p : parts) s += p;
  return s;
}

const std::string kCalls =
    cat({"\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n",
         "<｜DSML｜parameter name=\"city\" string=\"true\">Paris \"Ville\"</｜DSML｜parameter>\n",
         "<｜DSML｜parameter name=\"days\" string=\"false\">3</｜DSML｜parameter>\n",
         "</｜DSML｜invoke>\n<｜DSML｜invoke name=\"now\">\n\n</｜DSML｜invoke>\n", "</｜DSML｜tool_calls>"});

TEST(CompletionParser, ReasoningThenContent) {
  const ParsedCompletion p = parse_completion(cat({"Simple arithmetic.", kThinkEnd, "2 + 2 = 4.", kEos}), thinking());
  EXPECT_EQ(p.reasoning_content, "Simple arithmetic.");
  EXPECT_EQ(p.content, "2 + 2 = 4.");
  EXPECT_TRUE(p.tool_calls.empty());
}

// Broken bytes in a tool's name and string argument become U+FFFD, one per maximal subpart (core/utf8.h,
// Python's errors="replace"): a truncated character one, an overlong sequence three.
TEST(CompletionParser, ToolCallsRepairBrokenUtf8AsPython) {
  const std::string calls = cat({"\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_\xE4\xB8\">\n",
                                 "<｜DSML｜parameter name=\"city\" string=\"true\">a\xE0\x80\xAF"
                                 "b</｜DSML｜parameter>\n",
                                 "</｜DSML｜invoke>\n", "</｜DSML｜tool_calls>"});
  const ParsedCompletion p = parse_completion(cat({"think", kThinkEnd, calls, kEos}), thinking());
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].name, "get_\uFFFD");
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"city\": \"a\uFFFD\uFFFD\uFFFDb\"}");
}

TEST(CompletionParser, ChatModeIsContentOnly) {
  const ParsedCompletion p = parse_completion("Hi <b>there</b>\n\nbye", chat());
  EXPECT_EQ(p.content, "Hi <b>there</b>\n\nbye");
  EXPECT_EQ(p.reasoning_content, "");
}

// skip_special_tokens false: stray special tokens stay in the text (reasoning and content alike); the
// markers the parse is made of (</think>, DSML, EOS) are still taken, whichever way the text is split.
TEST(CompletionParser, KeepSpecialTokensKeepsStrayOnes) {
  ParserOptions keep = thinking();
  keep.keep_special_tokens = true;
  const std::string text = cat({"a<｜User｜>b", kThinkEnd, "c <｜Assistant｜>d", kEos, "e"});
  const ParsedCompletion kept = parse_completion(text, keep), dropped = parse_completion(text, thinking());
  EXPECT_EQ(kept.reasoning_content, "a<｜User｜>b");
  EXPECT_EQ(kept.content, "c <｜Assistant｜>d");
  EXPECT_EQ(dropped.content, "c d");
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ASSERT_EQ(parse_in_pieces(text, {cut}, keep), parse_whole(text, keep)) << cut;
  }
}

TEST(CompletionParser, ToolCalls) {
  const ParsedCompletion p = parse_completion(cat({"think", kThinkEnd, "Let me check.", kCalls, kEos}), thinking());
  EXPECT_EQ(p.reasoning_content, "think");
  EXPECT_EQ(p.content, "Let me check.");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0], (ToolCall{"call_0", "get_weather", R"({"city": "Paris \"Ville\"", "days": 3})"}));
  EXPECT_EQ(p.tool_calls[1], (ToolCall{"call_1", "now", "{}"}));
  const ordered_json m = to_openai_message(p);
  EXPECT_EQ(m.dump(), R"({"role":"assistant","content":"Let me check.","reasoning_content":"think","tool_calls":[)"
                      R"({"id":"call_0","type":"function","function":{"name":"get_weather","arguments":)"
                      R"("{\"city\": \"Paris \\\"Ville\\\"\", \"days\": 3}"}},{"id":"call_1","type":"function",)"
                      R"("function":{"name":"now","arguments":"{}"}}]})");
}

TEST(CompletionParser, ToolCallsRightAfterReasoning) {
  const ParsedCompletion p = parse_completion(cat({"plan", kCalls}), thinking());
  EXPECT_EQ(p.reasoning_content, "plan");
  EXPECT_EQ(p.content, "");
  EXPECT_EQ(p.tool_calls.size(), 2u);
  EXPECT_TRUE(to_openai_message(p)["content"].is_null());
}

TEST(CompletionParser, StrayTokensAreDropped) {
  const ParsedCompletion p =
      parse_completion(cat({"<think>r<｜User｜>", kThinkEnd, "a<｜Assistant｜>b</think>c<think>d"}), thinking());
  EXPECT_EQ(p.reasoning_content, "r");
  EXPECT_EQ(p.content, "abcd");
}

TEST(CompletionParser, LookalikesStayText) {
  const std::string text = "a <｜not closed, <｜x｜y｜> <thin> <｜DSML｜invoke name=\"f\"> \n<｜DSML｜tool_call";
  EXPECT_EQ(parse_completion(text, chat()).content, text);
  const std::string long_name = "<｜" + std::string(100, 'n') + "｜>";
  EXPECT_EQ(parse_completion(long_name, chat()).content, long_name);
}

TEST(CompletionParser, EverythingAfterEosIsIgnored) {
  CompletionParser parser(chat());
  testing::Outcome out;
  testing::record(out, parser.feed(cat({"done", kEos, "junk"})));
  EXPECT_TRUE(parser.done());
  testing::record(out, parser.feed("more"));
  testing::record(out, parser.finish());
  EXPECT_EQ(out.parsed.content, "done");
}

TEST(CompletionParser, UnclosedReasoningIsAllReasoning) {
  const ParsedCompletion p = parse_completion("still thinking <", thinking());
  EXPECT_EQ(p.reasoning_content, "still thinking <");
  EXPECT_EQ(p.content, "");
}

TEST(CompletionParser, BadValuesAreQuoted) {
  const std::string text = cat({kCalls.substr(0, kCalls.find("3</")), "three</｜DSML｜parameter>\n</｜DSML｜invoke>"});
  const ParsedCompletion p = parse_completion(text, chat());
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(p.tool_calls[0].arguments, R"({"city": "Paris \"Ville\"", "days": "three"})");
}

// Malformed invokes come back as plain content, raw from their first byte; earlier invokes stay.
TEST(CompletionParser, MalformedInvokesBecomeContent) {
  const std::string good = "<｜DSML｜invoke name=\"a\">\n</｜DSML｜invoke>";
  const std::string open = "x\n\n<｜DSML｜tool_calls>\n" + good + "\n";
  const std::vector<std::string> bad = {
      "<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"k\" "
      "string=\"maybe\">1</｜DSML｜parameter>\n</｜DSML｜invoke>",
      "<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"k\" string=\"true\">1</｜DSML｜parameter>\n"
      "<｜DSML｜parameter name=\"k\" string=\"true\">2</｜DSML｜parameter>\n</｜DSML｜invoke>",
      "<｜DSML｜invoke name=\"\">\n</｜DSML｜invoke>",
      "<｜DSML｜invoke name=\"f\">\nstray text</｜DSML｜invoke>",
      "<｜DSML｜invoke name=\"f\n\">\n</｜DSML｜invoke>",
      "<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"k\" string=\"true\">never closed",
      "garbage",
  };
  for (const std::string& b : bad) {
    SCOPED_TRACE(b);
    const ParsedCompletion p = parse_completion(open + b + "\n</｜DSML｜tool_calls>", chat());
    ASSERT_EQ(p.tool_calls.size(), 1u);
    EXPECT_EQ(p.tool_calls[0].name, "a");
    EXPECT_EQ(p.content, "x" + b + "\n</｜DSML｜tool_calls>");
  }
}

TEST(CompletionParser, TextAfterTheBlockIsContent) {
  const ParsedCompletion p = parse_completion(cat({"a", kCalls, "b", kEos}), chat());
  EXPECT_EQ(p.content, "ab");
  EXPECT_EQ(p.tool_calls.size(), 2u);
}

TEST(CompletionParser, Ids) {
  const std::string text = cat({kCalls});
  ParserOptions o = chat();
  o.tool_call_id_prefix = "req7-";
  const ParsedCompletion fixed = parse_completion(text, o);
  EXPECT_EQ(fixed.tool_calls[0].id, "req7-0");
  EXPECT_EQ(fixed.tool_calls[1].id, "req7-1");
  o.tool_call_id_prefix.clear();
  const ParsedCompletion random = parse_completion(text, o);
  for (const auto& c : random.tool_calls) {
    EXPECT_EQ(c.id.size(), 29u);
    EXPECT_TRUE(c.id.starts_with("call_"));
  }
  EXPECT_NE(random.tool_calls[0].id, random.tool_calls[1].id);
}

TEST(CompletionParser, DeltasAreWholeUtf8Characters) {
  const std::string text = "中文😀é and more 中";
  CompletionParser parser(chat());
  std::string seen;
  for (char c : text) {
    for (const auto& e : parser.feed(std::string_view(&c, 1))) {
      const auto last = static_cast<unsigned char>(e.text.back());
      EXPECT_TRUE(last < 0x80 || (last & 0xC0) == 0x80) << "a delta ends inside a character";
      seen += e.text;
    }
  }
  for (const auto& e : parser.finish()) seen += e.text;
  EXPECT_EQ(seen, text);
}

// A long parameter value streamed byte by byte must not cost quadratic time.
TEST(CompletionParser, LongValueStreamsInLinearTime) {
  std::string value(200000, 'v');
  const std::string text = cat({"<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"write\">\n",
                                "<｜DSML｜parameter name=\"data\" string=\"true\">", value,
                                "</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"});
  CompletionParser parser(chat());
  testing::Outcome out;
  for (char c : text) testing::record(out, parser.feed(std::string_view(&c, 1)));
  testing::record(out, parser.finish());
  ASSERT_EQ(out.parsed.tool_calls.size(), 1u);
  EXPECT_EQ(out.parsed.tool_calls[0].arguments, "{\"data\": \"" + value + "\"}");
}

// The assistant turns of the golden conversations, as the model would generate them (the
// encoder's rendering after "<｜Assistant｜><think>"), parse back to the original message.
std::vector<ordered_json> golden_assistants() {
  std::vector<ordered_json> out;
  const fs::path dir = dsv4::testing::golden_dir("encoding");
  auto add_from = [&](const ordered_json& messages) {
    for (const auto& m : messages)
      if (m.value("role", "") == "assistant") out.push_back(m);
  };
  for (int n = 1; n <= 4; ++n) {
    std::ifstream f(dir / fmt::format("test_input_{}.json", n));
    const ordered_json j = ordered_json::parse(f);
    add_from(j.is_object() ? j["messages"] : j);
  }
  for (const auto& entry : fs::directory_iterator(dir / "cases")) {
    std::ifstream f(entry.path());
    add_from(ordered_json::parse(f)["messages"]);
  }
  return out;
}

std::string generated_text(const ordered_json& assistant) {
  EncodeOptions o;
  o.drop_thinking = false;
  const ordered_json user = {{"role", "user"}, {"content", "q"}};
  const std::string prefix = encode_messages(ordered_json::array({user}), o);
  return encode_messages(ordered_json::array({user, assistant}), o).substr(prefix.size());
}

TEST(CompletionParser, GoldenAssistantTurnsRoundTrip) {
  const auto assistants = golden_assistants();
  ASSERT_GE(assistants.size(), 8u);
  for (const auto& m : assistants) {
    const std::string text = generated_text(m);
    SCOPED_TRACE(text);
    const ParsedCompletion p = parse_completion(text, thinking());
    EXPECT_EQ(p.reasoning_content, m.value("reasoning_content", ""));
    EXPECT_EQ(p.content, m.value("content", ""));
    const ordered_json calls = m.value("tool_calls", ordered_json::array());
    ASSERT_EQ(p.tool_calls.size(), calls.size());
    for (size_t i = 0; i < calls.size(); ++i) {
      EXPECT_EQ(p.tool_calls[i].name, calls[i]["function"]["name"]);
      EXPECT_EQ(ordered_json::parse(p.tool_calls[i].arguments),
                ordered_json::parse(calls[i]["function"]["arguments"].get<std::string>()));
    }
  }
}

std::vector<std::pair<std::string, ParserOptions>> transcripts() {
  std::vector<std::pair<std::string, ParserOptions>> t = {
      {cat({"Simple arithmetic.", kThinkEnd, "2 + 2 = 4.", kEos}), thinking()},
      {cat({"r\n\n", kThinkEnd, "Let me check.", kCalls, kEos}), thinking()},
      {cat({"plan", kCalls, "tail <｜x｜>y\n"}), thinking()},
      {cat({"<think>r<｜User｜>", kThinkEnd, "a<｜Assistant｜>b</think>c 中文😀\n<thin"}), thinking()},
      {"a <｜not closed, <｜x｜y｜> \n<｜DSML｜tool_call <｜DSML｜invoke name=\"f\">\n\n\n", chat()},
      {cat({"x\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"a\">\n</｜DSML｜invoke>\n",
            "<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"k\" string=\"maybe\">1</｜DSML｜parameter>\n",
            "</｜DSML｜invoke>\n</｜DSML｜tool_calls>", kEos, "junk"}),
       chat()},
      {cat({"<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"k\" string=\"true\">v"}),
       chat()},
  };
  for (const auto& m : golden_assistants()) t.emplace_back(generated_text(m), thinking());
  return t;
}

TEST(CompletionParser, EverySplitPointMatchesOneShot) {
  for (const auto& [text, o] : transcripts()) {
    SCOPED_TRACE(text);
    const Outcome whole = parse_whole(text, o);
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      const Outcome split = parse_in_pieces(text, {cut}, o);
      ASSERT_EQ(split, whole) << "cut at " << cut << "\n" << describe(split) << "\n" << describe(whole);
    }
  }
}

TEST(CompletionParser, RandomChunkingsMatchOneShot) {
  std::mt19937 rng(99);
  for (const auto& [text, o] : transcripts()) {
    SCOPED_TRACE(text);
    const Outcome whole = parse_whole(text, o);
    for (int trial = 0; trial < 30; ++trial) {
      std::vector<size_t> cuts;
      for (size_t at = 0;;) {
        at += 1 + rng() % 8;
        if (at >= text.size()) break;
        cuts.push_back(at);
      }
      ASSERT_EQ(parse_in_pieces(text, cuts, o), whole);
    }
  }
}

}  // namespace
}  // namespace dsv4::chat
