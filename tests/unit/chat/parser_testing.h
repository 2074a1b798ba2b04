// Helpers shared by the completion-parser tests: feeding text in pieces, comparing outcomes.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <vector>

#include "chat/completion_parser.h"

namespace dsv4::chat::testing {

// Everything a parse produced: the gathered message plus the order of event kinds (adjacent
// events of one kind merged), which is what a streaming client observes.
struct Outcome {
  ParsedCompletion parsed;
  std::vector<ParseEvent::Kind> kinds;
  bool operator==(const Outcome& o) const {
    return parsed.reasoning_content == o.parsed.reasoning_content && parsed.content == o.parsed.content &&
           parsed.tool_calls == o.parsed.tool_calls && kinds == o.kinds;
  }
};

inline void record(Outcome& out, const std::vector<ParseEvent>& events) {
  for (const auto& e : events) {
    out.parsed.add(e);
    const bool merge = e.kind != ParseEvent::Kind::kToolCall && !out.kinds.empty() && out.kinds.back() == e.kind;
    if (!merge) out.kinds.push_back(e.kind);
  }
}

// Feeds text cut at the given offsets (ascending), then finishes.
inline Outcome parse_in_pieces(std::string_view text, const std::vector<size_t>& cuts, const ParserOptions& o) {
  CompletionParser parser(o);
  Outcome out;
  size_t at = 0;
  for (size_t c : cuts) {
    record(out, parser.feed(text.substr(at, c - at)));
    at = c;
  }
  record(out, parser.feed(text.substr(at)));
  record(out, parser.finish());
  return out;
}

inline Outcome parse_whole(std::string_view text, const ParserOptions& o) { return parse_in_pieces(text, {}, o); }

inline std::string describe(const Outcome& o) {
  std::string s = "reasoning=[" + o.parsed.reasoning_content + "] content=[" + o.parsed.content + "] calls=";
  for (const auto& c : o.parsed.tool_calls) s += "{" + c.id + " " + c.name + " " + c.arguments + "}";
  s += " kinds=";
  for (auto k : o.kinds) s += std::to_string(static_cast<int>(k));
  return s;
}

}  // namespace dsv4::chat::testing
