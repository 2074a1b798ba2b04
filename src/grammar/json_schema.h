// JSON Schema (the subset structured-output clients send) as a grammar of the JSON texts the schema
// accepts. Supported: type (one or a list), enum, const, object (properties in schema order,
// required, additionalProperties false / true / a schema; a missing additionalProperties means false,
// as in OpenAI's strict mode and xgrammar), array (items, prefixItems with items false, minItems,
// maxItems), string (minLength, maxLength, pattern as a whole-string match, format date, time,
// date-time, uuid, email, ipv4), integer (minimum, maximum, exclusive bounds), number (integral
// minimum and maximum), boolean, null, anyOf, oneOf (as anyOf), allOf of one schema, nullable, $ref to
// "#", "#/$defs/..." and "#/definitions/..." (recursion included). Annotations (title, description,
// default, examples, ...) are ignored. Anything else is refused: dsv4::Error "json_schema: ..."
// naming the keyword and where it is.
//
// Members come out in the schema's order; optional ones may be left out. Strings with length bounds
// use only JSON's canonical escapes, so each counted character is one decoded character.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <unordered_map>

#include "grammar/grammar.h"

namespace dsv4::grammar {

class JsonSchemaCompiler {
 public:
  // `root` is what "#" refers to; it must outlive the compiler.
  JsonSchemaCompiler(Grammar& g, const nlohmann::ordered_json& root);
  // The JSON values `schema` accepts; `path` names it in errors ("#/properties/a").
  ExprId value(const nlohmann::ordered_json& schema, const std::string& path = "#");

 private:
  ExprId typed(const nlohmann::ordered_json& s, const std::string& type, const std::string& path);
  ExprId object(const nlohmann::ordered_json& s, const std::string& path);
  ExprId array(const nlohmann::ordered_json& s, const std::string& path);
  ExprId string(const nlohmann::ordered_json& s, const std::string& path);
  ExprId number(const nlohmann::ordered_json& s, bool integer, const std::string& path);
  ExprId enumeration(const nlohmann::ordered_json& values);
  ExprId literal_value(const nlohmann::ordered_json& v);
  ExprId reference(const std::string& ref, const std::string& path);
  ExprId extra_key(const std::vector<std::string>& taken);

  Grammar& g_;
  const nlohmann::ordered_json& root_;
  std::unordered_map<std::string, RuleId> refs_;
  int lanes_ = 0;
};

// The grammar of a whole document: the schema's value.
Grammar json_schema_grammar(const nlohmann::ordered_json& schema);
// Any JSON object (response_format json_object).
Grammar json_object_grammar();

}  // namespace dsv4::grammar
