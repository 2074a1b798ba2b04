// Runs the libFuzzer target's seed corpus and a few thousand random mutations of it through
// parse_safetensors_header in the ordinary (g++) build: the only failure allowed is dsv4::Error,
// and every accepted header must describe ranges inside the input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "core/error.h"
#include "io/safetensors.h"
#include "testing/paths.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

// Found from the data folder, not __FILE__: a build with ccache's base directory compiles relative paths.
fs::path corpus_dir() { return testing::data_dir() / "../fuzz/corpus/safetensors_header"; }

std::vector<uint8_t> read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Parses `file`; true when accepted. Fails the test on anything but dsv4::Error or a bad range.
bool parse_checked(const std::vector<uint8_t>& file) {
  try {
    SafetensorsHeader h = parse_safetensors_header(file, file.size(), "fuzz.safetensors");
    for (const TensorInfo& t : h.tensors) {
      EXPECT_LE(t.begin, t.end) << t.name;
      EXPECT_LE(h.data_start + t.end, file.size()) << t.name;
      EXPECT_EQ(t.nbytes(), static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype)) << t.name;
    }
    return true;
  } catch (const Error& e) {
    EXPECT_TRUE(std::string_view(e.what()).starts_with("fuzz.safetensors: ")) << e.what();
    return false;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "non-dsv4 exception: " << e.what();
  } catch (...) {
    ADD_FAILURE() << "unknown exception";
  }
  return false;
}

std::vector<std::pair<std::string, std::vector<uint8_t>>> seeds() {
  std::vector<std::pair<std::string, std::vector<uint8_t>>> out;
  for (const auto& e : fs::directory_iterator(corpus_dir()))
    out.emplace_back(e.path().filename(), read_bytes(e.path()));
  std::sort(out.begin(), out.end());
  return out;
}

TEST(SafetensorsHeaderFuzz, SeedCorpusParsesOrFailsAsNamed) {
  const auto all = seeds();
  ASSERT_GE(all.size(), 10u) << corpus_dir();
  for (const auto& [name, bytes] : all) {
    EXPECT_EQ(parse_checked(bytes), name.starts_with("valid_")) << name;
  }
}

// One random edit: overwrite, insert, erase, truncate, duplicate a slice, or change the length.
void mutate(std::vector<uint8_t>& f, std::mt19937& rng) {
  static const std::string_view tokens[] = {"{",
                                            "}",
                                            "[",
                                            "]",
                                            ",",
                                            ":",
                                            "\"",
                                            "-",
                                            "0",
                                            "9",
                                            ".5",
                                            "e9",
                                            "\"dtype\"",
                                            "\"shape\"",
                                            "\"data_offsets\"",
                                            "\"__metadata__\"",
                                            "\"F8_E4M3\"",
                                            "18446744073709551615",
                                            "\xff"};
  auto pos = [&] { return f.empty() ? size_t{0} : rng() % (f.size() + 1); };
  switch (rng() % 7) {
    case 0:
      if (!f.empty()) f[rng() % f.size()] = static_cast<uint8_t>(rng());
      break;
    case 1: {
      const auto& t = tokens[rng() % std::size(tokens)];
      f.insert(f.begin() + static_cast<ptrdiff_t>(pos()), t.begin(), t.end());
      break;
    }
    case 2: {
      const size_t a = pos(), n = std::min<size_t>(rng() % 8 + 1, f.size() - a);
      f.erase(f.begin() + static_cast<ptrdiff_t>(a), f.begin() + static_cast<ptrdiff_t>(a + n));
      break;
    }
    case 3:
      f.resize(pos());
      break;
    case 4: {
      const size_t a = pos(), n = std::min<size_t>(rng() % 16 + 1, f.size() - a);
      std::vector<uint8_t> slice(f.begin() + static_cast<ptrdiff_t>(a), f.begin() + static_cast<ptrdiff_t>(a + n));
      f.insert(f.begin() + static_cast<ptrdiff_t>(pos()), slice.begin(), slice.end());
      break;
    }
    case 5:  // the header length, so it no longer matches the JSON
      if (f.size() >= 8) f[rng() % 8] = static_cast<uint8_t>(rng());
      break;
    default:
      if (!f.empty()) f[rng() % f.size()] ^= static_cast<uint8_t>(1u << (rng() % 8));
      break;
  }
}

TEST(SafetensorsHeaderFuzz, RandomMutationsOnlyThrowDsv4Errors) {
  std::vector<std::vector<uint8_t>> valid;
  for (const auto& [name, bytes] : seeds()) {
    if (name.starts_with("valid_")) valid.push_back(bytes);
  }
  ASSERT_FALSE(valid.empty());
  std::mt19937 rng(20260424);
  int accepted = 0;
  const int kRuns = 4000;
  for (int i = 0; i < kRuns; ++i) {
    std::vector<uint8_t> f = valid[rng() % valid.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) mutate(f, rng);
    accepted += parse_checked(f);
    if (::testing::Test::HasFailure()) break;  // one report is enough
  }
  // Some mutations keep the file valid (e.g. a changed data byte), most must not.
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, kRuns / 2);
}

}  // namespace
}  // namespace dsv4
