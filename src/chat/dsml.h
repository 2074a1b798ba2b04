// DSML, the markup DeepSeek-V4 writes tool calls in:
//   <｜DSML｜tool_calls>
//   <｜DSML｜invoke name="NAME">
//   <｜DSML｜parameter name="K" string="true|false">VALUE</｜DSML｜parameter>
//   </｜DSML｜invoke>
//   </｜DSML｜tool_calls>
// String values are written raw with string="true"; all others as JSON with string="false".
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace dsv4::chat {

inline constexpr std::string_view kDsmlToolCallsOpen = "<｜DSML｜tool_calls>";
inline constexpr std::string_view kDsmlToolCallsClose = "</｜DSML｜tool_calls>";
inline constexpr std::string_view kDsmlInvokeOpen = "<｜DSML｜invoke";  // then ` name="NAME">`
inline constexpr std::string_view kDsmlInvokeClose = "</｜DSML｜invoke>";
inline constexpr std::string_view kDsmlParameterOpen = "<｜DSML｜parameter";  // then ` name=.. string=..>`
inline constexpr std::string_view kDsmlParameterClose = "</｜DSML｜parameter>";

// One parameter as the model wrote it.
struct DsmlParameter {
  std::string name;
  std::string value;  // raw text between the tags
  bool is_string = true;
};

// The parameters of one invoke, one per line, from a JSON object of arguments.
std::string render_dsml_parameters(const nlohmann::ordered_json& arguments);

// `<｜DSML｜invoke name="NAME">\n{parameters}\n</｜DSML｜invoke>`.
std::string render_dsml_invoke(std::string_view name, std::string_view parameters);

// `\n\n<｜DSML｜tool_calls>\n` + invokes joined by "\n" + `\n</｜DSML｜tool_calls>`.
std::string render_dsml_tool_calls(const std::vector<std::string>& invokes);

// The OpenAI `arguments` string for parsed parameters, as the official decoder builds it:
// `{"K": V, ...}` with string values JSON-quoted and others inserted as written. A non-string
// value that is not valid JSON is quoted as a string so the result always parses.
std::string dsml_arguments_json(const std::vector<DsmlParameter>& parameters);

}  // namespace dsv4::chat
