// Structured output on the server side: the request fields (OpenAI's and vLLM's shapes, one at a time,
// refusals by name), tool_choice, the forced DSML tool call (every text its grammar lets through parses
// into well-formed calls whose arguments fit the schemas), and the constraint the engine gets (the real
// V4 tokenizer: reasoning, then the grammar).
#include "server/structured_output.h"

#include <gtest/gtest.h>

#include "chat/completion_parser.h"
#include "server/api_error.h"
#include "server/forced_tool_call.h"
#include "server/structured_output_request.h"
#include "server_test_support.h"
#include "unit/grammar/grammar_testing.h"

namespace dsv4::server {
namespace {

using Kind = StructuredOutputRequest::Kind;

ApiError error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  return ApiError(0, "", "");
}

ToolChoice choice(ToolChoice::Mode mode, std::string name = "", bool parallel = true) {
  ToolChoice c;
  c.mode = mode;
  c.name = std::move(name);
  c.parallel = parallel;
  return c;
}

chat::ParserOptions chat_mode() {
  chat::ParserOptions o;
  o.thinking_mode = chat::ThinkingMode::kChat;
  return o;
}

StructuredOutputRequest parse(const char* text) {
  const Json j = Json::parse(text);
  return parse_structured_output(RequestFields(j));
}

TEST(StructuredOutputRequest, EveryShape) {
  EXPECT_EQ(parse(R"({})").kind, Kind::kNone);
  EXPECT_EQ(parse(R"({"response_format": {"type": "text"}})").kind, Kind::kNone);
  EXPECT_EQ(parse(R"({"response_format": {"type": "json_object"}})").kind, Kind::kJsonObject);
  const auto js = parse(R"({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "strict": true,
                          "schema": {"type": "integer"}}}})");
  EXPECT_EQ(js.kind, Kind::kJsonSchema);
  EXPECT_EQ(js.schema, Json::parse(R"({"type": "integer"})"));
  EXPECT_EQ(parse(R"({"guided_json": "{\"type\": \"null\"}"})").schema, Json::parse(R"({"type": "null"})"));
  EXPECT_EQ(parse(R"({"guided_regex": "a+"})").text, "a+");
  EXPECT_EQ(parse(R"({"guided_choice": ["x", "y"]})").choices, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(parse(R"({"guided_grammar": "root ::= \"a\""})").kind, Kind::kGrammar);
  const auto so = parse(R"({"structured_outputs": {"choice": ["a"], "disable_any_whitespace": true}})");
  EXPECT_EQ(so.kind, Kind::kChoice);
  EXPECT_EQ(so.param, "structured_outputs.choice");
  EXPECT_EQ(parse(R"({"structured_outputs": {"json_object": true}})").kind, Kind::kJsonObject);
}

TEST(StructuredOutputRequest, RefusalsNameTheField) {
  const auto e = [](const char* t) { return error_of([&] { parse(t); }); };
  EXPECT_EQ(e(R"({"guided_regex": "a", "guided_choice": ["b"]})").param(), "guided_choice");
  EXPECT_NE(std::string(e(R"({"guided_regex": "a", "guided_choice": ["b"]})").what()).find("give one"),
            std::string::npos);
  EXPECT_EQ(e(R"({"guided_choice": []})").param(), "guided_choice");
  EXPECT_EQ(e(R"({"guided_json": "not json"})").param(), "guided_json");
  EXPECT_EQ(e(R"({"response_format": {"type": "json_schema"}})").param(), "response_format.json_schema");
  EXPECT_NE(std::string(e(R"({"response_format": {"type": "structural_tag"}})").what()).find("not supported"),
            std::string::npos);
  EXPECT_EQ(e(R"({"guided_whitespace_pattern": " "})").param(), "guided_whitespace_pattern");
  EXPECT_EQ(e(R"({"structured_outputs": {"whitespace_pattern": " "}})").param(),
            "structured_outputs.whitespace_pattern");
}

TEST(StructuredOutputRequest, ToolChoice) {
  const auto tc = [](const char* t) {
    const Json j = Json::parse(t);
    return parse_tool_choice(RequestFields(j));
  };
  EXPECT_EQ(tc(R"({})").mode, ToolChoice::Mode::kAuto);
  EXPECT_EQ(tc(R"({"tool_choice": "none"})").mode, ToolChoice::Mode::kNone);
  EXPECT_EQ(tc(R"({"tool_choice": "required", "parallel_tool_calls": false})").parallel, false);
  const ToolChoice named = tc(R"({"tool_choice": {"type": "function", "function": {"name": "f"}}})");
  EXPECT_EQ(named.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(named.name, "f");
  EXPECT_EQ(error_of([&] { tc(R"({"tool_choice": {"type": "function"}})"); }).param(), "tool_choice");
}

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string", "maxLength": 6},
      "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
      "days": {"type": "integer", "minimum": 1, "maximum": 7},
      "hourly": {"type": "boolean"},
      "spots": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2}},
    "required": ["city", "days"]}}},
  {"type": "function", "function": {"name": "ping"}}
])";

// Random texts of the forced-call grammar parse into calls of the listed tools with fitting arguments.
void expect_walks_parse(const ToolChoice& want, size_t max_calls) {
  const Json tools = Json::parse(kTools);
  const auto vocab = grammar::testing::synthetic_vocab();
  const auto g = grammar::testing::compile(forced_tool_call_grammar(tools, want), vocab);
  std::mt19937_64 rng(31);
  int ended = 0;
  for (int i = 0; i < 60; ++i) {
    const auto w = grammar::testing::random_walk(g, *vocab, rng, 600);
    if (!w.ended) continue;
    ++ended;
    const chat::ParsedCompletion p = chat::parse_completion(w.text, chat_mode());
    ASSERT_FALSE(p.tool_calls.empty()) << w.text;
    EXPECT_LE(p.tool_calls.size(), max_calls);
    EXPECT_EQ(p.content, "") << w.text;
    for (const chat::ToolCall& c : p.tool_calls) {
      if (want.mode == ToolChoice::Mode::kNamed) {
        EXPECT_EQ(c.name, want.name);
      }
      const Json args = Json::parse(c.arguments);
      if (c.name == "ping") {
        EXPECT_TRUE(args.empty()) << c.arguments;
        continue;
      }
      ASSERT_EQ(c.name, "get_weather");
      ASSERT_TRUE(args.contains("city") && args.contains("days")) << c.arguments;
      EXPECT_TRUE(args["city"].is_string() && args["city"].get<std::string>().size() <= 6 * 4) << c.arguments;
      EXPECT_TRUE(args["days"].is_number_integer() && args["days"] >= 1 && args["days"] <= 7) << c.arguments;
      EXPECT_TRUE(!args.contains("unit") || args["unit"] == "celsius" || args["unit"] == "fahrenheit");
      EXPECT_TRUE(!args.contains("hourly") || args["hourly"].is_boolean());
      EXPECT_TRUE(!args.contains("spots") || (args["spots"].is_array() && args["spots"].size() <= 2));
    }
  }
  EXPECT_GT(ended, 20);
}

TEST(ForcedToolCall, EveryAllowedTextParsesIntoValidCalls) {
  expect_walks_parse(choice(ToolChoice::Mode::kRequired), 100);
  expect_walks_parse(choice(ToolChoice::Mode::kRequired, "", false), 1);
  expect_walks_parse(choice(ToolChoice::Mode::kNamed, "get_weather"), 1);
}

TEST(ForcedToolCall, RawStringsAndRefusals) {
  const Json tools = Json::parse(R"([{"type": "function", "function": {"name": "say", "parameters":
      {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}}}])");
  const auto g = grammar::testing::compile(forced_tool_call_grammar(tools, choice(ToolChoice::Mode::kRequired)),
                                           grammar::testing::synthetic_vocab());
  const std::string call =
      "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"say\">\n<｜DSML｜parameter name=\"text\" "
      "string=\"true\">a <b> \"quoted\" </｜DSML｜param</｜DSML｜parameter>\n</｜DSML｜invoke>\n</"
      "｜DSML｜tool_calls>";
  EXPECT_TRUE(grammar::testing::accepts(*g, call));
  const auto p = chat::parse_completion(call, chat_mode());
  ASSERT_EQ(p.tool_calls.size(), 1u);
  EXPECT_EQ(Json::parse(p.tool_calls[0].arguments)["text"], "a <b> \"quoted\" </｜DSML｜param");
  const auto refused = [&](const char* t, const ToolChoice& c) {
    try {
      forced_tool_call_grammar(Json::parse(t), c);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(refused(kTools, choice(ToolChoice::Mode::kNamed, "nope")).find("no tool is named \"nope\""),
            std::string::npos);
  EXPECT_NE(refused(R"([{"type": "function", "function": {"name": "a\"b"}}])", choice(ToolChoice::Mode::kRequired))
                .find("cannot be written in DSML"),
            std::string::npos);
  EXPECT_NE(refused(R"([{"type": "function", "function": {"name": "f", "parameters": {"type": "object",
      "properties": {"x": {"not": {}}}}}}])",
                    choice(ToolChoice::Mode::kRequired))
                .find("'not'"),
            std::string::npos);
}

// The engine's constraint over the V4 vocabulary: in thinking mode any reasoning, "</think>", then the
// schema's JSON; the tokenizer's own tokens for such a text are accepted one by one, EOS only at the end.
TEST(StructuredOutputConstraint, ThinkingThenJson) {
  DSV4_REQUIRE_TOKENIZER();
  const Tokenizer& tok = *servertest::real_tokenizer();
  GrammarCache cache;
  StructuredOutputRequest s;
  s.kind = Kind::kJsonSchema;
  s.param = "response_format.json_schema";
  s.schema = Json::parse(R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})");
  const auto factory = make_constraint(cache, tok, 1, {.structured = &s, .thinking = true});
  ASSERT_NE(factory, nullptr);
  EXPECT_NE(make_constraint(cache, tok, 1, {.structured = &s, .thinking = true}), nullptr);
  EXPECT_EQ(cache.size(), 1u);  // compiled once
  const auto c = factory->make();
  std::span<const uint32_t> mask;
  const auto ids = tok.encode("Let me think: {\"n\": 3} is it.</think>{\"n\": -12}");
  for (size_t i = 0; i < ids.size(); ++i) {
    mask = c->allowed();
    ASSERT_EQ(mask.size(), (static_cast<size_t>(tok.vocab_size()) + 31) / 32);
    EXPECT_FALSE((mask[0] >> 1) & 1u) << "EOS allowed before the end, at token " << i;
    ASSERT_TRUE((mask[static_cast<size_t>(ids[i]) >> 5] >> (ids[i] & 31)) & 1u) << "token " << i << " masked";
    ASSERT_TRUE(c->accept(ids[i])) << "token " << i;
  }
  mask = c->allowed();
  EXPECT_TRUE((mask[0] >> 1) & 1u);
  EXPECT_FALSE(c->accept(tok.encode("x")[0]));
  // A schema the compiler refuses is a 400 naming the field and the keyword.
  s.schema = Json::parse(R"({"type": "string", "format": "hostname"})");
  const ApiError e = error_of([&] { make_constraint(cache, tok, 1, {.structured = &s}); });
  EXPECT_EQ(e.param(), "response_format.json_schema");
  EXPECT_NE(std::string(e.what()).find("format \"hostname\""), std::string::npos);
}

}  // namespace
}  // namespace dsv4::server
