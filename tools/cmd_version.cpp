// dsv4 version: prints the engine version (and whether the CUDA backend is built in).
#include <fmt/core.h>

#include "core/version.h"
#include "tools/command.h"

namespace dsv4::tools {
namespace {

void setup(CLI::App& cmd) {
  cmd.callback([] {
#ifdef DSV4_HAVE_CUDA
    fmt::print("dsv4 {} (backends: cpu, cuda)\n", kVersion);
#else
    fmt::print("dsv4 {} (backends: cpu)\n", kVersion);
#endif
  });
}

}  // namespace

DSV4_COMMAND("version", "print the version", setup);

}  // namespace dsv4::tools
