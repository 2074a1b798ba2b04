// dsv4 version: prints the engine version and the backends built in.
#include <fmt/core.h>
#include <fmt/ranges.h>

#include "backend/backend.h"
#include "core/version.h"
#include "tools/command.h"

namespace dsv4::tools {
namespace {

void setup(CLI::App& cmd) {
  cmd.callback([] { fmt::print("dsv4 {} (backends: {})\n", kVersion, fmt::join(built_backends(), ", ")); });
}

}  // namespace

DSV4_COMMAND("version", "print the version", setup);

}  // namespace dsv4::tools
