// Tokenizer speed on one core: encode English prose (the Debian license texts, or DSV4_BENCH_TEXT), CJK, and
// decode / stream-detokenize. Compare with HF tokenizers on the same text: tests/tokenizer/bench_hf.py.
// The tokenizer comes from DSV4_TOKENIZER or the embedded one (tokenizer_locator.h).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "core/utf8.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_locator.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

const Tokenizer& tokenizer() {
  static const Tokenizer tok = Tokenizer::load(locate_tokenizer(TokenizerSearch::from_environment()));
  return tok;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The prose that bench_hf.py reads too: DSV4_BENCH_TEXT, else every license text of Debian, by name.
const std::string& prose() {
  static const std::string text = [] {
    if (const char* f = std::getenv("DSV4_BENCH_TEXT")) return read_file(f);
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator("/usr/share/common-licenses"))
      if (e.is_regular_file() && !e.is_symlink()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    std::string all;
    for (const auto& f : files) all += read_file(f);
    return all;
  }();
  return text;
}

const std::string& cjk() {
  static const std::string text = [] {
    std::mt19937 rng(1);
    std::string s;
    while (s.size() < (1 << 20)) {
      for (int k = rng() % 20; k >= 0; --k) utf8::append_codepoint(0x4E00 + rng() % 0x51A6, s);
      s += std::array<const char*, 4>{"，", "。", "！", "\n"}[rng() % 4];
    }
    return utf8::lossy(s);
  }();
  return text;
}

void encode(benchmark::State& state, const std::string& text) {
  const Tokenizer& tok = tokenizer();
  std::vector<int32_t> ids;
  for (auto _ : state) {
    ids.clear();
    tok.encode(text, ids);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * text.size()));
  state.counters["tokens"] = static_cast<double>(ids.size());
}

void BM_EncodeProse(benchmark::State& state) { encode(state, prose()); }
void BM_EncodeCjk(benchmark::State& state) { encode(state, cjk()); }

void BM_Decode(benchmark::State& state) {
  const auto ids = tokenizer().encode(prose());
  for (auto _ : state) benchmark::DoNotOptimize(tokenizer().decode(ids));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * prose().size()));
}

void BM_DetokenizeStream(benchmark::State& state) {
  const auto ids = tokenizer().encode(prose());
  std::string out;
  for (auto _ : state) {
    out.clear();
    Detokenizer d(tokenizer());
    for (const int32_t id : ids) d.push(id, out);
    d.finish(out);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * ids.size()));
}

BENCHMARK(BM_EncodeProse)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_EncodeCjk)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DetokenizeStream)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace dsv4

BENCHMARK_MAIN();
