// Subcommands of the dsv4 binary. Each tools/cmd_*.cpp registers one with DSV4_COMMAND; its
// setup function adds options to the CLI11 subcommand and sets a callback that returns the
// process exit code through set_exit_code (errors are thrown as dsv4::Error).
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

namespace dsv4::tools {

using CommandSetup = void (*)(CLI::App& cmd);

struct CommandRegistrar {
  CommandRegistrar(const char* name, const char* description, CommandSetup setup);
};

void set_exit_code(int code);

// Adds MODEL as a positional argument that --model may also give.
CLI::Option* add_model_option(CLI::App& cmd, std::string& model, bool required = true);
// --numerics exact|fast (spec/NUMERICS.md); empty: the backend's default (fast on CUDA, exact on CPU).
CLI::Option* add_numerics_option(CLI::App& cmd, std::string& numerics);

// A flag's comma list of numbers ("50,90,99"); an item that is not a number is an Error naming `flag`.
std::vector<double> parse_number_list(const std::string& s, const char* flag);
std::vector<int64_t> parse_int_list(const std::string& s, const char* flag);

}  // namespace dsv4::tools

#define DSV4_COMMAND_CAT2(a, b) a##b
#define DSV4_COMMAND_CAT(a, b) DSV4_COMMAND_CAT2(a, b)
#define DSV4_COMMAND(name, description, setup) \
  static const ::dsv4::tools::CommandRegistrar DSV4_COMMAND_CAT(dsv4_command_, __LINE__)(name, description, setup)
