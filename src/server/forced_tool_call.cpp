#include "server/forced_tool_call.h"

#include <set>

#include "chat/dsml.h"
#include "core/error.h"
#include "grammar/free_text.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "grammar/utf8_ranges.h"

namespace dsv4::server {
namespace {

using Json = nlohmann::ordered_json;
using grammar::ExprId;
using grammar::Grammar;

// A raw string parameter: enum values, a pattern or length bounds on the text itself, else any text.
ExprId raw_string(Grammar& g, const Json& s, const std::string& where) {
  const std::string close(chat::kDsmlParameterClose);
  if (s.contains("enum") || s.contains("const")) {
    std::vector<ExprId> alts;
    for (const Json& v : s.contains("enum") ? s["enum"] : Json::array({s["const"]})) {
      DSV4_CHECK(v.is_string(), "{}: a string parameter's enum holds a non-string", where);
      alts.push_back(g.literal(v.get<std::string>()));
    }
    return g.seq({g.alt(std::move(alts)), g.literal(close)});
  }
  if (s.contains("pattern")) {
    DSV4_CHECK(s["pattern"].is_string(), "{}: 'pattern' must be a string", where);
    return g.seq({grammar::parse_regex(g, s["pattern"].get<std::string>()), g.literal(close)});
  }
  if (s.contains("maxLength") || s.contains("minLength")) {
    const auto lo = s.value("minLength", int64_t{0}), hi = s.value("maxLength", int64_t{-1});
    DSV4_CHECK(lo >= 0 && lo <= 10000 && hi <= 10000 && (hi < 0 || hi >= lo), "{}: bad length bounds", where);
    // Any character but '<', so the text cannot run into the closing tag.
    const ExprId c = grammar::utf8_chars(g, grammar::CodepointSet::all().minus(grammar::CodepointSet::range('<', '<')));
    return g.seq({g.repeat(c, static_cast<int32_t>(lo), hi < 0 ? grammar::kUnbounded : static_cast<int32_t>(hi)),
                  g.literal(close)});
  }
  return grammar::text_until(g, close, where);
}

bool is_plain_string(const Json& s) { return s.is_object() && s.value("type", Json()) == "string"; }

// `<｜DSML｜parameter name="K" string="...">VALUE</｜DSML｜parameter>` for one property.
ExprId parameter(Grammar& g, grammar::JsonSchemaCompiler& json, const std::string& name, const Json& schema,
                 const std::string& where) {
  DSV4_CHECK(name.find_first_of("\"<\n") == std::string::npos, "{}: the parameter name cannot be written in DSML",
             where);
  const bool raw = is_plain_string(schema);
  const std::string head =
      std::string(chat::kDsmlParameterOpen) + " name=\"" + name + "\" string=\"" + (raw ? "true" : "false") + "\">";
  if (raw) return g.seq({g.literal(head), raw_string(g, schema, where)});
  return g.seq({g.literal(head), json.value(schema, where), g.literal(std::string(chat::kDsmlParameterClose))});
}

ExprId invoke(Grammar& g, const Json& function, const std::string& where) {
  const std::string name = function.value("name", "");
  DSV4_CHECK(!name.empty() && name.find_first_of("\"<\n") == std::string::npos,
             "{}: the function name \"{}\" cannot be written in DSML", where, name);
  const Json params = function.contains("parameters") ? function["parameters"] : Json::object();
  DSV4_CHECK(params.is_object(), "{}.parameters must be an object", where);
  std::vector<ExprId> parts{g.literal(std::string(chat::kDsmlInvokeOpen) + " name=\"" + name + "\">\n")};
  grammar::JsonSchemaCompiler json(g, params);
  const Json props = params.value("properties", Json::object());
  std::set<std::string> required;
  for (const Json& r : params.value("required", Json::array()))
    if (r.is_string()) required.insert(r.get<std::string>());
  for (const auto& [key, schema] : props.items()) {
    const ExprId line =
        g.seq({parameter(g, json, key, schema, where + ".parameters.properties." + key), g.literal("\n")});
    parts.push_back(required.contains(key) ? line : g.optional(line));
  }
  parts.push_back(g.literal(std::string(chat::kDsmlInvokeClose)));
  return g.seq(std::move(parts));
}

}  // namespace

Grammar forced_tool_call_grammar(const Json& tools, const ToolChoice& choice) {
  Grammar g;
  std::vector<ExprId> invokes;
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& fn = tools[i].contains("function") ? tools[i]["function"] : Json::object();
    if (choice.mode == ToolChoice::Mode::kNamed && fn.value("name", "") != choice.name) continue;
    invokes.push_back(invoke(g, fn, fmt::format("tools[{}].function", i)));
  }
  if (invokes.empty()) {
    if (choice.mode == ToolChoice::Mode::kNamed) fail("no tool is named \"{}\"", choice.name);
    fail("no tools are given");
  }
  const ExprId one = g.alt(std::move(invokes));
  const bool many = choice.mode == ToolChoice::Mode::kRequired && choice.parallel;
  const ExprId calls = many ? g.seq({one, g.star(g.seq({g.literal("\n"), one}))}) : one;
  g.set_root(g.rule("tool_calls", g.seq({g.literal("\n\n" + std::string(chat::kDsmlToolCallsOpen) + "\n"), calls,
                                         g.literal("\n" + std::string(chat::kDsmlToolCallsClose))})));
  return g;
}

}  // namespace dsv4::server
