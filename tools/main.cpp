// dsv4: one binary, one subcommand per tools/cmd_*.cpp (DESIGN.md's command-line table).
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "core/error.h"
#include "core/version.h"
#include "tools/command.h"
#include "tools/parallel_flags.h"

namespace dsv4::tools {
namespace {

struct Entry {
  const char* name;
  const char* description;
  CommandSetup setup;
};

std::vector<Entry>& registry() {
  static std::vector<Entry> r;
  return r;
}

int g_exit_code = 0;

// Every long flag can also come from DSV4_<FLAG> (--max-model-len -> DSV4_MAX_MODEL_LEN).
void mirror_env(CLI::App& app) {
  for (CLI::Option* opt : app.get_options()) {
    const auto& names = opt->get_lnames();
    if (names.empty() || names[0] == "help" || names[0] == "version" || !opt->get_envname().empty()) continue;
    std::string env = "DSV4_" + names[0];
    std::transform(env.begin(), env.end(), env.begin(),
                   [](unsigned char c) { return c == '-' ? '_' : static_cast<char>(std::toupper(c)); });
    opt->envname(env);
  }
  for (CLI::App* sub : app.get_subcommands({})) mirror_env(*sub);
}

template <typename T, typename Parse>
std::vector<T> parse_list(const std::string& s, const char* flag, Parse parse) {
  std::vector<T> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      out.push_back(parse(item));
    } catch (const std::logic_error&) {  // std::sto*: not a number, or out of range
      fail("{}: \"{}\" is not a number", flag, item);
    }
  }
  return out;
}

}  // namespace

std::vector<double> parse_number_list(const std::string& s, const char* flag) {
  return parse_list<double>(s, flag, [](const std::string& item) { return std::stod(item); });
}

std::vector<int64_t> parse_int_list(const std::string& s, const char* flag) {
  return parse_list<int64_t>(s, flag, [](const std::string& item) { return static_cast<int64_t>(std::stoll(item)); });
}

CommandRegistrar::CommandRegistrar(const char* name, const char* description, CommandSetup setup) {
  registry().push_back({name, description, setup});
}

void set_exit_code(int code) { g_exit_code = code; }

CLI::Option* add_model_option(CLI::App& cmd, std::string& model, bool required) {
  auto* opt = cmd.add_option("model,--model", model, "model directory (or config.json where noted)");
  if (required) opt->required();
  return opt;
}

CLI::Option* add_numerics_option(CLI::App& cmd, std::string& numerics) {
  return cmd
      .add_option("--numerics", numerics,
                  "exact | fast: how sums are formed (spec/NUMERICS.md); default fast on cuda, exact on cpu (the "
                  "CPU backend has the exact tier only)")
      ->check(CLI::IsMember({"exact", "fast"}));
}

}  // namespace dsv4::tools

int main(int argc, char** argv) {
  using namespace dsv4::tools;
  spdlog::set_default_logger(spdlog::stderr_color_mt("dsv4"));
  spdlog::set_pattern("%^%L%$ %H:%M:%S.%e %v");

  CLI::App app{"dsv4: DeepSeek-V4 inference and serving engine"};
  app.set_version_flag("--version", std::string(dsv4::kVersion));
  app.require_subcommand(1);
  auto& reg = registry();
  std::sort(reg.begin(), reg.end(), [](const Entry& a, const Entry& b) { return std::string_view(a.name) < b.name; });
  for (const auto& e : reg) e.setup(*app.add_subcommand(e.name, e.description));
  mirror_env(app);
  try {
    const std::vector<std::string> args = expand_parallel_short_flags(argc, argv);
    std::vector<const char*> ptrs;
    for (const auto& a : args) ptrs.push_back(a.c_str());
    app.parse(static_cast<int>(ptrs.size()), ptrs.data());
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const dsv4::Error& e) {
    spdlog::error("{}", e.what());
    return 1;
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    return 2;
  }
  return g_exit_code;
}
