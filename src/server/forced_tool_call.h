// tool_choice "required" or a named function: the DSML tool-call block the completion must be, as a
// grammar, so that the chat parser always finds well-formed calls (chat/dsml.h):
//   "\n\n<｜DSML｜tool_calls>\n" invoke ("\n" invoke)* "\n</｜DSML｜tool_calls>"   (one invoke when
//   parallel_tool_calls is false or a function is named)
//   invoke: <｜DSML｜invoke name="NAME">\n then one line per parameter, in the schema's order (optional
//   ones may be left out), then </｜DSML｜invoke>
//   a parameter whose schema is {"type": "string"} is raw text (string="true": enum values, a pattern or
//   a length bound apply to the raw text); any other is JSON by its schema (string="false").
// Errors (a tool name the parser could not read back, a parameter schema the JSON-schema compiler
// refuses, an unknown named function) throw dsv4::Error naming the tool and parameter.
#pragma once

#include <nlohmann/json.hpp>

#include "grammar/grammar.h"
#include "server/structured_output_request.h"

namespace dsv4::server {

// `tools`: the request's tools array (OpenAI shape: {"type": "function", "function": {"name",
// "parameters"}}).
grammar::Grammar forced_tool_call_grammar(const nlohmann::ordered_json& tools, const ToolChoice& choice);

}  // namespace dsv4::server
