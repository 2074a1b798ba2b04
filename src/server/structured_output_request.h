// The structured-output fields of a generation request, as OpenAI and vLLM spell them, parsed into one
// description (at most one of them per request):
//   response_format {"type": "json_object"} | {"type": "json_schema", "json_schema": {"schema", "strict",
//     "name"}} | {"type": "text"} (nothing);
//   guided_json (a schema, or its JSON text), guided_regex, guided_choice, guided_grammar (vLLM < 0.12);
//   structured_outputs {"json" | "regex" | "choice" | "grammar" | "json_object": true} (vLLM's newer name).
// And the chat tool_choice: "auto", "none", "required" or {"type": "function", "function": {"name"}}.
// Options that would change the grammar in ways not implemented (whitespace patterns, structural tags)
// are refused, never ignored.
#pragma once

#include <string>
#include <vector>

#include "server/request_fields.h"

namespace dsv4::server {

struct StructuredOutputRequest {
  enum class Kind { kNone, kJsonObject, kJsonSchema, kRegex, kChoice, kGrammar };
  Kind kind = Kind::kNone;
  Json schema;                       // kJsonSchema
  std::string text;                  // kRegex, kGrammar
  std::vector<std::string> choices;  // kChoice
  std::string param;                 // the field it came from, for errors
};

StructuredOutputRequest parse_structured_output(const RequestFields& f);

struct ToolChoice {
  enum class Mode { kAuto, kNone, kRequired, kNamed };
  Mode mode = Mode::kAuto;
  std::string name;      // kNamed
  bool parallel = true;  // parallel_tool_calls: more than one call when required
};

ToolChoice parse_tool_choice(const RequestFields& f);

}  // namespace dsv4::server
