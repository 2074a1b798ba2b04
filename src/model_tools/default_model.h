// The embedded default model: the `serve` preset, generated under DSV4_HOME on first use.
#pragma once

#include <filesystem>

namespace dsv4 {

// DSV4_HOME, default ~/.cache/dsv4.
std::filesystem::path dsv4_home();

// Returns the folder of the default model, creating it first if needed. A file lock makes
// concurrent first uses (two servers starting at once) wait for one generation.
std::filesystem::path ensure_default_model();

}  // namespace dsv4
