// The encoder against DeepSeek's official encoder, byte for byte: the official test pairs and
// cases in tests/data/golden/encoding, and random cases in data/ made by data/make_encoding_cases.py.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/encoding.h"
#include "testing/paths.h"

namespace dsv4::chat {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  EXPECT_TRUE(f.good()) << p;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

EncodeOptions case_options(const ordered_json& c) {
  EncodeOptions o;
  o.thinking_mode = parse_thinking_mode(c.at("thinking_mode").get<std::string>());
  o.reasoning_effort = parse_reasoning_effort(c.value("reasoning_effort", ordered_json()));
  o.drop_thinking = c.value("drop_thinking", true);
  o.add_default_bos_token = c.value("add_default_bos_token", true);
  if (c.contains("context")) o.context = c["context"];
  return o;
}

TEST(EncodingGolden, OfficialTestPairs) {
  const fs::path dir = testing::golden_dir("encoding");
  for (int n = 1; n <= 4; ++n) {
    SCOPED_TRACE(n);
    ordered_json input = ordered_json::parse(read_file(dir / fmt::format("test_input_{}.json", n)));
    if (input.is_object()) {  // {"tools", "messages"}: the tools go on the first message
      ordered_json messages = input["messages"];
      messages[0]["tools"] = input["tools"];
      input = messages;
    }
    EncodeOptions o;
    o.thinking_mode = n == 4 ? ThinkingMode::kChat : ThinkingMode::kThinking;
    EXPECT_EQ(encode_messages(input, o), read_file(dir / fmt::format("test_output_{}.txt", n)));
  }
}

TEST(EncodingGolden, Cases) {
  int count = 0;
  for (const auto& entry : fs::directory_iterator(testing::golden_dir("encoding") / "cases")) {
    SCOPED_TRACE(entry.path().filename().string());
    const ordered_json c = ordered_json::parse(read_file(entry.path()));
    EXPECT_EQ(encode_messages(c.at("messages"), case_options(c)), c.at("expected").get<std::string>());
    ++count;
  }
  EXPECT_GE(count, 4);
}

TEST(EncodingGolden, OfficialRandomCases) {
  // Found from the data folder, not __FILE__: a build with ccache's base directory compiles relative paths.
  const fs::path file = testing::data_dir() / "../unit/chat/data/official_random_cases.jsonl";
  ASSERT_TRUE(fs::exists(file)) << file;
  std::istringstream lines(read_file(file));
  int count = 0;
  for (std::string line; std::getline(lines, line);) {
    SCOPED_TRACE(count);
    const ordered_json c = ordered_json::parse(line);
    EXPECT_EQ(encode_messages(c.at("messages"), case_options(c)), c.at("expected").get<std::string>());
    ++count;
  }
  EXPECT_EQ(count, 40);
}

}  // namespace
}  // namespace dsv4::chat
