// Parsing DeepSeek-V4 completions into OpenAI message parts: reasoning_content, content and
// tool_calls (ECOSYSTEM.md §2.4). The text is what the model generated after the prompt, with
// special tokens kept as text (detokenise with special tokens on); the end-of-sentence token is
// optional. In thinking mode the prompt ends with "<think>", so the text starts as reasoning
// until "</think>"; in chat mode it is content from the start.
//
// Unlike the official parse_message_from_completion_text, which asserts on anything but
// well-formed output, this parser never fails:
//   - a tool-call block may also start inside the reasoning (reasoning ends there, as in vLLM);
//   - stray <think>, </think> and special tokens "<｜...｜>" are dropped from visible text (special
//     tokens are kept with keep_special_tokens, the request's skip_special_tokens false);
//   - an invoke that does not parse is given back as plain content, raw, from its first byte;
//   - text after "</｜DSML｜tool_calls>" is content again; everything after EOS is ignored.
// Streaming holds back only what could still become a marker (a partial tag straddling chunk
// boundaries, an unfinished invoke, an incomplete UTF-8 sequence), so any split of the text into
// deltas yields the same events, concatenated, as one call with the whole text.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "chat/dsml.h"
#include "chat/encoding.h"

namespace dsv4::chat {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // a JSON object as text, e.g. {"city": "Paris"}
  bool operator==(const ToolCall&) const = default;
};

// One piece of parsed output, in generation order.
struct ParseEvent {
  enum class Kind { kReasoning, kContent, kToolCall };
  Kind kind = Kind::kContent;
  std::string text;     // kReasoning, kContent
  ToolCall tool_call;   // kToolCall
  int tool_index = -1;  // kToolCall: 0, 1, ... in order
};

struct ParserOptions {
  ThinkingMode thinking_mode = ThinkingMode::kThinking;
  // Tool-call ids are this prefix + the call's index; when empty, each id is "call_" + 24 random
  // alphanumerics.
  std::string tool_call_id_prefix;
  bool keep_special_tokens = false;
};

// A whole completion, gathered from events.
struct ParsedCompletion {
  std::string reasoning_content;
  std::string content;
  std::vector<ToolCall> tool_calls;
  void add(const ParseEvent& event);
};

// The incremental parser: feed() text deltas as they are generated, then finish() once.
class CompletionParser {
 public:
  explicit CompletionParser(ParserOptions options = {});

  std::vector<ParseEvent> feed(std::string_view delta);
  // End of generation: releases what was held back (an unfinished invoke becomes content).
  std::vector<ParseEvent> finish();
  // The end-of-sentence token was seen; later text is ignored.
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kReasoning, kContent, kToolCalls, kDone };
  enum class Step { kAgain, kWait };
  enum class Stage { kHeader, kBody, kParamHead, kParamValue };
  struct Invoke {
    bool active = false;
    Stage stage = Stage::kHeader;
    size_t pos = 0;  // parsed bytes from the invoke's first byte
    std::string name;
    std::vector<DsmlParameter> params;
    size_t value_start = 0;
    size_t search_from = 0;
  };
  enum class Progress { kComplete, kNeedMore, kBad };

  void run(bool final);
  Step step_text(bool final);
  Step step_tool_calls(bool final);
  Progress continue_invoke();
  Progress parse_invoke_header(std::string_view r);
  Progress parse_invoke_body(std::string_view r);
  Progress parse_param_head(std::string_view r);
  Progress parse_param_value(std::string_view r);
  void give_back_as_content();
  void emit_text(std::string_view s);
  void emit_tool_call();
  std::string next_tool_call_id();
  std::string_view rest() const { return std::string_view(buf_).substr(pos_); }
  void consume(size_t n) { pos_ += n; }

  ParserOptions options_;
  State state_;
  std::string buf_;
  size_t pos_ = 0;
  Invoke invoke_;
  int n_tool_calls_ = 0;
  std::vector<ParseEvent> out_;
  std::mt19937_64 rng_;
};

// One-shot: the same as feeding the whole text and finishing.
ParsedCompletion parse_completion(std::string_view text, const ParserOptions& options = {});

// {"role": "assistant", "content": ..., "reasoning_content": ..., "tool_calls": [{"id", "type":
// "function", "function": {"name", "arguments"}}]}; content is null when empty and there are tool
// calls; reasoning_content only when non-empty; tool_calls only when there are some.
nlohmann::ordered_json to_openai_message(const ParsedCompletion& parsed);

}  // namespace dsv4::chat
