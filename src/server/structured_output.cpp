#include "server/structured_output.h"

#include "chat/special_tokens.h"
#include "core/error.h"
#include "grammar/choice.h"
#include "grammar/ebnf.h"
#include "grammar/free_text.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "server/api_error.h"
#include "server/forced_tool_call.h"
#include "server/thinking_budget.h"

namespace dsv4::server {
namespace {

using Kind = StructuredOutputRequest::Kind;

class GrammarConstraint final : public TokenConstraint {
 public:
  explicit GrammarConstraint(std::shared_ptr<const grammar::CompiledGrammar> g) : matcher_(std::move(g)) {}

  // The grammar's cached mask where it lies (the tokenizer's vocabulary: at least the sampler's limit).
  std::span<const uint32_t> allowed() override { return matcher_.mask(); }
  bool accept(int32_t token) override { return matcher_.accept(token); }
  void rollback(size_t k) override { matcher_.rollback(k); }

 private:
  grammar::Matcher matcher_;
};

class GrammarConstraintFactory final : public TokenConstraintFactory {
 public:
  explicit GrammarConstraintFactory(std::shared_ptr<const grammar::CompiledGrammar> g) : g_(std::move(g)) {}
  std::unique_ptr<TokenConstraint> make() const override { return std::make_unique<GrammarConstraint>(g_); }

 private:
  std::shared_ptr<const grammar::CompiledGrammar> g_;
};

// The request's grammar (without the reasoning), and the text it is cached under.
grammar::Grammar body_grammar(const ConstraintRequest& r) {
  if (r.tool_choice != nullptr &&
      (r.tool_choice->mode == ToolChoice::Mode::kRequired || r.tool_choice->mode == ToolChoice::Mode::kNamed)) {
    return forced_tool_call_grammar(r.tools ? *r.tools : Json::array(), *r.tool_choice);
  }
  const StructuredOutputRequest& s = *r.structured;
  switch (s.kind) {
    case Kind::kJsonObject:
      return grammar::json_object_grammar();
    case Kind::kJsonSchema:
      return grammar::json_schema_grammar(s.schema);
    case Kind::kRegex:
      return grammar::regex_grammar(s.text);
    case Kind::kChoice:
      return grammar::choice_grammar(s.choices);
    case Kind::kGrammar:
      return grammar::parse_ebnf(s.text);
    case Kind::kNone:
      break;
  }
  fail("no structured output");
}

std::string cache_key(const ConstraintRequest& r, bool forced) {
  std::string key = r.thinking ? "think\x1f" : "chat\x1f";
  if (forced) {
    const ToolChoice& c = *r.tool_choice;
    key += fmt::format("tools\x1f{}\x1f{}\x1f{}\x1f", static_cast<int>(c.mode), c.name, c.parallel);
    return key + (r.tools ? r.tools->dump() : "");
  }
  const StructuredOutputRequest& s = *r.structured;
  key += std::to_string(static_cast<int>(s.kind)) + "\x1f";
  if (s.kind == Kind::kJsonSchema) return key + s.schema.dump();
  if (s.kind == Kind::kChoice) {
    for (const std::string& c : s.choices) key += c + "\x1e";
    return key;
  }
  return key + s.text;
}

// Reasoning (any text up to "</think>"), then the body.
grammar::Grammar after_reasoning(const grammar::Grammar& body) {
  grammar::Grammar g;
  const grammar::RuleId inner = g.import(body, "body ");
  g.set_root(g.rule("root", g.seq({grammar::text_until(g, chat::kThinkEnd, "reasoning"), g.ref(inner)})));
  return g;
}

}  // namespace

namespace {

std::shared_ptr<const TokenConstraintFactory> grammar_constraint(GrammarCache& cache, const Tokenizer& tokenizer,
                                                                 int32_t eos, const ConstraintRequest& r) {
  const bool forced = r.tool_choice != nullptr && (r.tool_choice->mode == ToolChoice::Mode::kRequired ||
                                                   r.tool_choice->mode == ToolChoice::Mode::kNamed);
  const bool structured = r.structured != nullptr && r.structured->kind != Kind::kNone;
  if (!forced && !structured) return nullptr;
  if (forced && structured)
    bad_request("tool_choice", "'tool_choice' {} and '{}' both constrain the output; give one",
                r.tool_choice->mode == ToolChoice::Mode::kRequired ? "\"required\"" : "(a named function)",
                r.structured->param);
  const std::string param = forced ? "tool_choice" : r.structured->param;
  try {
    const auto compiled = cache.get(
        cache_key(r, forced),
        [&] {
          grammar::Grammar body = body_grammar(r);
          return r.thinking ? after_reasoning(body) : body;
        },
        tokenizer, eos);
    return std::make_shared<GrammarConstraintFactory>(compiled);
  } catch (const Error& e) {
    bad_request(param, "'{}' cannot be enforced: {}", param, e.what());
  }
}

}  // namespace

std::shared_ptr<const TokenConstraintFactory> make_constraint(GrammarCache& cache, const Tokenizer& tokenizer,
                                                              int32_t eos, const ConstraintRequest& r) {
  auto grammar = grammar_constraint(cache, tokenizer, eos, r);
  if (!r.thinking || r.thinking_budget < 0) return grammar;
  const std::vector<int32_t> end = tokenizer.encode(chat::kThinkEnd);
  if (end.size() != 1) bad_request("thinking", "a thinking budget needs \"{}\" as one token", chat::kThinkEnd);
  return std::make_shared<ThinkingBudgetFactory>(r.thinking_budget, end[0], tokenizer.vocab_size(), std::move(grammar));
}

}  // namespace dsv4::server
