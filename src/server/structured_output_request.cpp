#include "server/structured_output_request.h"

#include "server/api_error.h"

namespace dsv4::server {
namespace {

using Kind = StructuredOutputRequest::Kind;

// A schema given as an object or as its JSON text.
Json schema_of(const Json& v, const std::string& param) {
  if (v.is_object() || v.is_boolean()) return v;
  if (v.is_string()) {
    Json parsed = Json::parse(v.get<std::string>(), nullptr, false);
    if (!parsed.is_discarded() && (parsed.is_object() || parsed.is_boolean())) return parsed;
  }
  bad_request(param, "'{}' must be a JSON schema (an object, or its JSON text), got {}", param, json_excerpt(v));
}

std::vector<std::string> choices_of(const Json& v, const std::string& param) {
  if (!v.is_array() || v.empty()) bad_request(param, "'{}' must be a non-empty array of strings", param);
  std::vector<std::string> out;
  for (const Json& c : v) {
    if (!c.is_string()) bad_request(param, "'{}' must hold strings, got {}", param, json_excerpt(c));
    out.push_back(c.get<std::string>());
  }
  return out;
}

std::string text_of(const Json& v, const std::string& param) {
  if (!v.is_string() || v.get_ref<const std::string&>().empty())
    bad_request(param, "'{}' must be a non-empty string, got {}", param, json_excerpt(v));
  return v.get<std::string>();
}

void set(StructuredOutputRequest& r, Kind kind, const std::string& param) {
  if (r.kind != Kind::kNone) bad_request(param, "'{}' and '{}' both constrain the output; give one", r.param, param);
  r.kind = kind;
  r.param = param;
}

void response_format(const RequestFields& f, StructuredOutputRequest& r) {
  const Json* rf = f.object("response_format");
  if (rf == nullptr) return;
  const RequestFields o(*rf, "response_format.");
  const std::string type = o.string("type").value_or("");
  if (type == "text") return;
  if (type == "json_object") return set(r, Kind::kJsonObject, "response_format");
  if (type != "json_schema") {
    if (type == "structural_tag") not_supported("response_format.type", "'response_format' \"structural_tag\"");
    bad_request("response_format.type",
                "'response_format.type' must be \"text\", \"json_object\" or \"json_schema\", got \"{}\"", type);
  }
  const Json* js = o.object("json_schema");
  if (js == nullptr) bad_request("response_format.json_schema", "'response_format.json_schema' is required");
  const RequestFields j(*js, "response_format.json_schema.");
  const Json* schema = j.get("schema");
  set(r, Kind::kJsonSchema, "response_format.json_schema");
  r.schema = schema ? schema_of(*schema, "response_format.json_schema.schema") : Json::object();
}

// The four kinds under their names in one object: guided_json ... at the top level (prefix "guided_"),
// or json ... inside structured_outputs.
void kinds(const RequestFields& f, std::string_view prefix, StructuredOutputRequest& r) {
  const auto name = [&](std::string_view kind) { return std::string(prefix) + std::string(kind); };
  if (const Json* v = f.get(name("json"))) {
    set(r, Kind::kJsonSchema, f.name(name("json")));
    r.schema = schema_of(*v, r.param);
  }
  if (const Json* v = f.get(name("regex"))) {
    set(r, Kind::kRegex, f.name(name("regex")));
    r.text = text_of(*v, r.param);
  }
  if (const Json* v = f.get(name("choice"))) {
    set(r, Kind::kChoice, f.name(name("choice")));
    r.choices = choices_of(*v, r.param);
  }
  if (const Json* v = f.get(name("grammar"))) {
    set(r, Kind::kGrammar, f.name(name("grammar")));
    r.text = text_of(*v, r.param);
  }
}

void guided(const RequestFields& f, StructuredOutputRequest& r) {
  kinds(f, "guided_", r);
  if (f.has("guided_whitespace_pattern")) not_supported("guided_whitespace_pattern", "'guided_whitespace_pattern'");
}

void structured_outputs(const RequestFields& f, StructuredOutputRequest& r) {
  const Json* so = f.object("structured_outputs");
  if (so == nullptr) return;
  const RequestFields o(*so, "structured_outputs.");
  for (const char* key : {"whitespace_pattern", "structural_tag"})
    if (o.has(key)) not_supported(o.name(key), fmt::format("'structured_outputs.{}'", key));
  // Accepted and true of every grammar here: whitespace is bounded; additional properties are off
  // unless a schema allows them.
  for (const char* key : {"disable_any_whitespace", "disable_fallback", "disable_additional_properties"})
    (void)o.boolean(key);
  kinds(o, "", r);
  if (o.boolean("json_object").value_or(false)) set(r, Kind::kJsonObject, "structured_outputs.json_object");
}

}  // namespace

StructuredOutputRequest parse_structured_output(const RequestFields& f) {
  StructuredOutputRequest r;
  response_format(f, r);
  guided(f, r);
  structured_outputs(f, r);
  return r;
}

ToolChoice parse_tool_choice(const RequestFields& f) {
  ToolChoice c;
  c.parallel = f.boolean("parallel_tool_calls").value_or(true);
  const Json* v = f.get("tool_choice");
  if (v == nullptr) return c;
  if (v->is_string()) {
    const std::string s = v->get<std::string>();
    if (s == "auto") return c;
    if (s == "none" || s == "required") {
      c.mode = s == "none" ? ToolChoice::Mode::kNone : ToolChoice::Mode::kRequired;
      return c;
    }
  } else if (v->is_object()) {
    const RequestFields o(*v, "tool_choice.");
    const Json* fn = o.object("function");
    const auto name = fn ? RequestFields(*fn, "tool_choice.function.").string("name") : std::nullopt;
    if (o.string("type").value_or("function") == "function" && name) {
      c.mode = ToolChoice::Mode::kNamed;
      c.name = *name;
      return c;
    }
  }
  bad_request("tool_choice",
              "'tool_choice' must be \"none\", \"auto\", \"required\" or {{\"type\": \"function\", \"function\": "
              "{{\"name\": ...}}}}, got {}",
              json_excerpt(*v));
}

}  // namespace dsv4::server
