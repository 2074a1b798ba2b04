#include "chat/completion_parser.h"

#include <array>

#include "chat/special_tokens.h"
#include "core/utf8.h"

namespace dsv4::chat {
namespace {

constexpr size_t kMaxSpecialName = 64;  // longest "<｜NAME｜>" name we wait for
constexpr size_t kMaxAttribute = 1024;  // longest tool or parameter name we wait for

enum class Marker { kNone, kPartial, kEos, kToolCalls, kThinkEnd, kThinkStart, kSpecial };

struct Match {
  Marker marker = Marker::kNone;
  size_t length = 0;
};

// The tool-call block may follow its "\n\n" separator (dropped with the marker) or not.
const std::string kToolCallsAfterBlank = "\n\n" + std::string(kDsmlToolCallsOpen);
const std::string kToolCallsAfterNewline = "\n" + std::string(kDsmlToolCallsOpen);

bool is_prefix_of(std::string_view r, std::string_view pattern) {
  return r.size() < pattern.size() && pattern.substr(0, r.size()) == r;
}

// "<｜NAME｜>" with a short NAME free of '<', '>', newlines and bars.
Match match_special(std::string_view r) {
  if (is_prefix_of(r, kSpecialOpen)) return {Marker::kPartial, 0};
  if (r.substr(0, kSpecialOpen.size()) != kSpecialOpen) return {};
  for (size_t j = kSpecialOpen.size(); j < r.size(); ++j) {
    const std::string_view tail = r.substr(j);
    if (tail.substr(0, kSpecialClose.size()) == kSpecialClose) {
      return j > kSpecialOpen.size() ? Match{Marker::kSpecial, j + kSpecialClose.size()} : Match{};
    }
    if (is_prefix_of(tail, kSpecialClose)) return {Marker::kPartial, 0};
    if (tail.substr(0, 3) == kSpecialClose.substr(0, 3)) return {};  // a bar not closing the token
    if (r[j] == '<' || r[j] == '>' || r[j] == '\n' || j - kSpecialOpen.size() >= kMaxSpecialName) return {};
  }
  return {Marker::kPartial, 0};
}

// Which marker starts the remaining text r (r begins with '<' or '\n'). kPartial: r is a proper
// prefix of a marker, so the answer depends on text not seen yet.
Match match_marker(std::string_view r) {
  struct Pattern {
    std::string_view text;
    Marker marker;
  };
  const std::array<Pattern, 6> patterns = {{{kEos, Marker::kEos},
                                            {kToolCallsAfterBlank, Marker::kToolCalls},
                                            {kToolCallsAfterNewline, Marker::kToolCalls},
                                            {kDsmlToolCallsOpen, Marker::kToolCalls},
                                            {kThinkEnd, Marker::kThinkEnd},
                                            {kThinkStart, Marker::kThinkStart}}};
  Match found;
  bool partial = false;
  for (const auto& p : patterns) {
    if (r.substr(0, p.text.size()) == p.text) {
      if (found.marker == Marker::kNone) found = {p.marker, p.text.size()};
    } else if (is_prefix_of(r, p.text)) {
      partial = true;
    }
  }
  const Match special = match_special(r);
  if (partial || special.marker == Marker::kPartial) return {Marker::kPartial, 0};
  return found.marker != Marker::kNone ? found : special;
}

// Bytes of s that end on a UTF-8 character boundary (drops an incomplete trailing sequence).
size_t complete_utf8_prefix(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t skip_space(std::string_view r, size_t p) {
  while (p < r.size() && is_space(r[p])) ++p;
  return p;
}

// A literal at r[p]: kOk (p advanced past it), kNeedMore (r ends inside it) or kBad.
enum class Lit { kOk, kNeedMore, kBad };
Lit expect(std::string_view r, size_t& p, std::string_view literal) {
  const std::string_view tail = r.substr(p);
  if (tail.substr(0, literal.size()) == literal) {
    p += literal.size();
    return Lit::kOk;
  }
  return is_prefix_of(tail, literal) ? Lit::kNeedMore : Lit::kBad;
}

// `name="VALUE"` (after optional spaces) with VALUE free of quotes, '<' and newlines.
Lit read_attribute(std::string_view r, size_t& p, std::string_view key, std::string& value) {
  size_t q = skip_space(r, p);
  if (q == r.size()) return Lit::kNeedMore;
  if (Lit l = expect(r, q, key); l != Lit::kOk) return l;
  if (Lit l = expect(r, q, "=\""); l != Lit::kOk) return l;
  const size_t start = q;
  while (q < r.size() && r[q] != '"') {
    if (r[q] == '<' || r[q] == '\n' || q - start >= kMaxAttribute) return Lit::kBad;
    ++q;
  }
  if (q == r.size()) return Lit::kNeedMore;
  value.assign(r.substr(start, q - start));
  p = q + 1;
  return Lit::kOk;
}

}  // namespace

void ParsedCompletion::add(const ParseEvent& event) {
  switch (event.kind) {
    case ParseEvent::Kind::kReasoning:
      reasoning_content += event.text;
      break;
    case ParseEvent::Kind::kContent:
      content += event.text;
      break;
    case ParseEvent::Kind::kToolCall:
      tool_calls.push_back(event.tool_call);
      break;
  }
}

CompletionParser::CompletionParser(ParserOptions options)
    : options_(std::move(options)),
      state_(options_.thinking_mode == ThinkingMode::kThinking ? State::kReasoning : State::kContent),
      rng_(options_.tool_call_id_prefix.empty() ? std::random_device{}() : 0) {}

std::vector<ParseEvent> CompletionParser::feed(std::string_view delta) {
  if (state_ != State::kDone) buf_.append(delta);
  run(/*final=*/false);
  return std::exchange(out_, {});
}

std::vector<ParseEvent> CompletionParser::finish() {
  run(/*final=*/true);
  return std::exchange(out_, {});
}

void CompletionParser::run(bool final) {
  for (;;) {
    Step step = Step::kWait;
    switch (state_) {
      case State::kReasoning:
      case State::kContent:
        step = step_text(final);
        break;
      case State::kToolCalls:
        step = step_tool_calls(final);
        break;
      case State::kDone:
        buf_.clear();
        pos_ = 0;
        return;
    }
    if (step == Step::kWait) break;
  }
  if (pos_ > 4096 && pos_ * 2 > buf_.size()) {  // drop the consumed prefix now and then
    buf_.erase(0, pos_);
    pos_ = 0;
  }
}

CompletionParser::Step CompletionParser::step_text(bool final) {
  const std::string_view r = rest();
  const size_t i = r.find_first_of("<\n");
  if (i == std::string_view::npos) {
    const size_t n = final ? r.size() : complete_utf8_prefix(r);
    emit_text(r.substr(0, n));
    consume(n);
    return Step::kWait;
  }
  emit_text(r.substr(0, i));
  consume(i);
  const Match m = match_marker(rest());
  if (m.marker == Marker::kPartial && !final) return Step::kWait;
  if (m.marker == Marker::kNone || m.marker == Marker::kPartial) {
    emit_text(rest().substr(0, 1));  // an ordinary '<' or newline
    consume(1);
    return Step::kAgain;
  }
  if (m.marker == Marker::kSpecial && options_.keep_special_tokens) emit_text(rest().substr(0, m.length));
  consume(m.length);
  switch (m.marker) {
    case Marker::kEos:
      state_ = State::kDone;
      break;
    case Marker::kToolCalls:
      state_ = State::kToolCalls;
      break;
    case Marker::kThinkEnd:
      if (state_ == State::kReasoning) state_ = State::kContent;
      break;
    default:
      break;  // a stray special token: dropped, or kept just above
  }
  return Step::kAgain;
}

CompletionParser::Step CompletionParser::step_tool_calls(bool final) {
  if (!invoke_.active) {
    size_t p = skip_space(rest(), 0);
    consume(p);
    const std::string_view r = rest();
    if (r.empty()) return Step::kWait;
    size_t q = 0;
    if (expect(r, q, kDsmlToolCallsClose) == Lit::kOk) {
      consume(q);
      state_ = State::kContent;
      return Step::kAgain;
    }
    if (expect(r, q, kEos) == Lit::kOk) {
      state_ = State::kDone;
      return Step::kAgain;
    }
    const Lit open = expect(r, q, kDsmlInvokeOpen);
    if (open == Lit::kOk) {
      invoke_ = Invoke{};
      invoke_.active = true;
      invoke_.pos = kDsmlInvokeOpen.size();
    } else {
      const bool maybe = open == Lit::kNeedMore || is_prefix_of(r, kDsmlToolCallsClose) || is_prefix_of(r, kEos);
      if (maybe && !final) return Step::kWait;
      give_back_as_content();
      return Step::kAgain;
    }
  }
  switch (continue_invoke()) {
    case Progress::kComplete:
      emit_tool_call();
      return Step::kAgain;
    case Progress::kNeedMore:
      if (!final) return Step::kWait;
      [[fallthrough]];
    case Progress::kBad:
      give_back_as_content();
      return Step::kAgain;
  }
  return Step::kWait;
}

CompletionParser::Progress CompletionParser::continue_invoke() {
  const std::string_view r = rest();
  for (;;) {
    Progress p = Progress::kBad;
    switch (invoke_.stage) {
      case Stage::kHeader:
        p = parse_invoke_header(r);
        break;
      case Stage::kBody:
        p = parse_invoke_body(r);
        break;
      case Stage::kParamHead:
        p = parse_param_head(r);
        break;
      case Stage::kParamValue:
        p = parse_param_value(r);
        break;
    }
    if (p != Progress::kComplete) return p;
    if (invoke_.stage == Stage::kBody && !invoke_.active) return Progress::kComplete;
  }
}

// ` name="NAME">` after "<｜DSML｜invoke".
CompletionParser::Progress CompletionParser::parse_invoke_header(std::string_view r) {
  size_t p = invoke_.pos;
  std::string name;
  Lit l = read_attribute(r, p, "name", name);
  if (l == Lit::kOk) l = expect(r, p, ">");
  if (l != Lit::kOk) return l == Lit::kNeedMore ? Progress::kNeedMore : Progress::kBad;
  if (name.empty()) return Progress::kBad;
  invoke_.name = std::move(name);
  invoke_.pos = p;
  invoke_.stage = Stage::kBody;
  return Progress::kComplete;
}

// Between parameters: the next parameter or the invoke's end (which clears `active`).
CompletionParser::Progress CompletionParser::parse_invoke_body(std::string_view r) {
  size_t p = skip_space(r, invoke_.pos);
  if (p == r.size()) return Progress::kNeedMore;
  size_t q = p;
  if (expect(r, q, kDsmlInvokeClose) == Lit::kOk) {
    invoke_.pos = q;
    invoke_.active = false;
    return Progress::kComplete;
  }
  q = p;
  const Lit param = expect(r, q, kDsmlParameterOpen);
  if (param == Lit::kOk) {
    invoke_.pos = q;
    invoke_.stage = Stage::kParamHead;
    return Progress::kComplete;
  }
  if (param == Lit::kNeedMore || is_prefix_of(r.substr(p), kDsmlInvokeClose)) return Progress::kNeedMore;
  return Progress::kBad;
}

// ` name="K" string="true|false">` after "<｜DSML｜parameter".
CompletionParser::Progress CompletionParser::parse_param_head(std::string_view r) {
  size_t p = invoke_.pos;
  DsmlParameter param;
  std::string is_string;
  Lit l = read_attribute(r, p, "name", param.name);
  if (l == Lit::kOk) l = read_attribute(r, p, "string", is_string);
  if (l == Lit::kOk) l = expect(r, p, ">");
  if (l != Lit::kOk) return l == Lit::kNeedMore ? Progress::kNeedMore : Progress::kBad;
  if (is_string != "true" && is_string != "false") return Progress::kBad;
  for (const auto& other : invoke_.params)
    if (other.name == param.name) return Progress::kBad;  // the official parser rejects duplicates too
  param.is_string = is_string == "true";
  invoke_.params.push_back(std::move(param));
  invoke_.pos = invoke_.value_start = invoke_.search_from = p;
  invoke_.stage = Stage::kParamValue;
  return Progress::kComplete;
}

// The raw value up to "</｜DSML｜parameter>"; remembers how far it looked, so long values cost
// linear time however finely they are streamed.
CompletionParser::Progress CompletionParser::parse_param_value(std::string_view r) {
  const size_t end = r.find(kDsmlParameterClose, invoke_.search_from);
  if (end == std::string_view::npos) {
    const size_t keep = kDsmlParameterClose.size() - 1;
    invoke_.search_from = std::max(invoke_.value_start, r.size() > keep ? r.size() - keep : 0);
    return Progress::kNeedMore;
  }
  invoke_.params.back().value.assign(r.substr(invoke_.value_start, end - invoke_.value_start));
  invoke_.pos = end + kDsmlParameterClose.size();
  invoke_.stage = Stage::kBody;
  return Progress::kComplete;
}

// The unparsable rest is read again as content, from its first byte.
void CompletionParser::give_back_as_content() {
  invoke_ = Invoke{};
  state_ = State::kContent;
}

void CompletionParser::emit_text(std::string_view s) {
  if (s.empty()) return;
  const auto kind = state_ == State::kReasoning ? ParseEvent::Kind::kReasoning : ParseEvent::Kind::kContent;
  if (!out_.empty() && out_.back().kind == kind) {
    out_.back().text += s;
  } else {
    ParseEvent e;
    e.kind = kind;
    e.text = s;
    out_.push_back(std::move(e));
  }
}

void CompletionParser::emit_tool_call() {
  ParseEvent e;
  e.kind = ParseEvent::Kind::kToolCall;
  e.tool_call = ToolCall{next_tool_call_id(), utf8::lossy(invoke_.name), dsml_arguments_json(invoke_.params)};
  e.tool_index = n_tool_calls_;
  out_.push_back(std::move(e));
  ++n_tool_calls_;
  consume(invoke_.pos);
  invoke_ = Invoke{};
}

std::string CompletionParser::next_tool_call_id() {
  if (!options_.tool_call_id_prefix.empty()) return options_.tool_call_id_prefix + std::to_string(n_tool_calls_);
  static constexpr std::string_view kAlnum = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[rng_() % kAlnum.size()];
  return id;
}

ParsedCompletion parse_completion(std::string_view text, const ParserOptions& options) {
  CompletionParser parser(options);
  ParsedCompletion parsed;
  for (const auto& e : parser.feed(text)) parsed.add(e);
  for (const auto& e : parser.finish()) parsed.add(e);
  return parsed;
}

nlohmann::ordered_json to_openai_message(const ParsedCompletion& parsed) {
  nlohmann::ordered_json m = {{"role", "assistant"}};
  if (parsed.content.empty() && !parsed.tool_calls.empty()) {
    m["content"] = nullptr;
  } else {
    m["content"] = parsed.content;
  }
  if (!parsed.reasoning_content.empty()) m["reasoning_content"] = parsed.reasoning_content;
  if (parsed.tool_calls.empty()) return m;
  auto& calls = m["tool_calls"] = nlohmann::ordered_json::array();
  for (const auto& c : parsed.tool_calls) {
    calls.push_back({{"id", c.id}, {"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return m;
}

}  // namespace dsv4::chat
