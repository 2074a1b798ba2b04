#include "chat/dsml.h"

#include "chat/python_json.h"

namespace dsv4::chat {

std::string render_dsml_parameters(const nlohmann::ordered_json& arguments) {
  std::string out;
  bool first = true;
  for (const auto& [key, value] : arguments.items()) {
    if (!first) out += '\n';
    first = false;
    const bool is_string = value.is_string();
    out += kDsmlParameterOpen;
    out += " name=\"" + key + "\" string=\"" + (is_string ? "true" : "false") + "\">";
    out += is_string ? value.get_ref<const std::string&>() : python_json_dumps(value);
    out += kDsmlParameterClose;
  }
  return out;
}

std::string render_dsml_invoke(std::string_view name, std::string_view parameters) {
  std::string out(kDsmlInvokeOpen);
  out += " name=\"";
  out += name;
  out += "\">\n";
  out += parameters;
  out += '\n';
  out += kDsmlInvokeClose;
  return out;
}

std::string render_dsml_tool_calls(const std::vector<std::string>& invokes) {
  std::string out = "\n\n";
  out += kDsmlToolCallsOpen;
  out += '\n';
  for (size_t i = 0; i < invokes.size(); ++i) {
    if (i > 0) out += '\n';
    out += invokes[i];
  }
  out += '\n';
  out += kDsmlToolCallsClose;
  return out;
}

std::string dsml_arguments_json(const std::vector<DsmlParameter>& parameters) {
  std::string out = "{";
  for (size_t i = 0; i < parameters.size(); ++i) {
    const DsmlParameter& p = parameters[i];
    if (i > 0) out += ", ";
    out += python_json_quote(p.name);
    out += ": ";
    if (!p.is_string && nlohmann::ordered_json::accept(p.value)) {
      out += p.value;
    } else {
      out += python_json_quote(p.value);
    }
  }
  out += '}';
  return out;
}

}  // namespace dsv4::chat
