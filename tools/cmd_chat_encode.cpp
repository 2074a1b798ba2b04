// dsv4 chat-encode: a chat case JSON on stdin -> the exact DeepSeek-V4 prompt bytes on stdout
// (no trailing newline). The input is either a case object
//   {"messages": [...], "thinking_mode": "chat"|"thinking", "reasoning_effort": null|"high"|"max",
//    "drop_thinking": bool, "add_default_bos_token": bool, "context": [...], "tools": [...]}
// (top-level "tools" go on the first message, as the official tests do; other keys are ignored)
// or a bare JSON array of messages. --thinking-mode overrides the case's mode.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "chat/encoding.h"
#include "core/error.h"
#include "tools/command.h"

namespace dsv4::tools {
namespace {

using ordered_json = nlohmann::ordered_json;

struct Args {
  std::string thinking_mode;
};

ordered_json read_stdin_json() {
  std::string text;
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), stdin)) > 0;) text.append(buf, n);
  ordered_json j = ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
  DSV4_CHECK(!j.is_discarded(), "stdin is not valid JSON ({} bytes)", text.size());
  return j;
}

bool bool_field(const ordered_json& c, const char* key, bool fallback) {
  auto it = c.find(key);
  if (it == c.end() || it->is_null()) return fallback;
  DSV4_CHECK(it->is_boolean(), "{} must be a boolean, got {}", key, it->type_name());
  return it->get<bool>();
}

// Splits a case into messages and options.
ordered_json parse_case(const ordered_json& c, chat::EncodeOptions& opts) {
  if (c.is_array()) return c;
  DSV4_CHECK(c.is_object() && c.contains("messages"),
             "stdin must be a case object with \"messages\" or a JSON array of messages");
  ordered_json messages = c["messages"];
  if (auto it = c.find("thinking_mode"); it != c.end() && !it->is_null()) {
    DSV4_CHECK(it->is_string(), "thinking_mode must be a string, got {}", it->type_name());
    opts.thinking_mode = chat::parse_thinking_mode(it->get<std::string>());
  }
  opts.reasoning_effort = chat::parse_reasoning_effort(c.value("reasoning_effort", ordered_json()));
  opts.drop_thinking = bool_field(c, "drop_thinking", true);
  opts.add_default_bos_token = bool_field(c, "add_default_bos_token", true);
  if (auto it = c.find("context"); it != c.end() && !it->is_null()) opts.context = *it;
  if (auto it = c.find("tools"); it != c.end() && !it->is_null()) {
    DSV4_CHECK(messages.is_array() && !messages.empty() && messages[0].is_object(),
               "top-level tools need a first message to go on");
    messages[0]["tools"] = *it;
  }
  return messages;
}

void run(const Args& args) {
  chat::EncodeOptions opts;
  const ordered_json messages = parse_case(read_stdin_json(), opts);
  if (!args.thinking_mode.empty()) opts.thinking_mode = chat::parse_thinking_mode(args.thinking_mode);
  const std::string prompt = chat::encode_messages(messages, opts);
  std::fwrite(prompt.data(), 1, prompt.size(), stdout);
  std::fflush(stdout);
}

void setup(CLI::App& cmd) {
  auto args = std::make_shared<Args>();
  cmd.add_option("--thinking-mode", args->thinking_mode, "chat or thinking (default: the case's, else thinking)")
      ->check(CLI::IsMember({"chat", "thinking"}));
  cmd.callback([args] { run(*args); });
}

}  // namespace

DSV4_COMMAND("chat-encode", "encode a chat case JSON (stdin) into the exact DeepSeek-V4 prompt", setup);

}  // namespace dsv4::tools
