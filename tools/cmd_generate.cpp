// dsv4 generate [MODEL] --prompt-ids 1,2,3 | --prompt TEXT [--chat] --max-tokens N [--temperature T]:
// one request straight through the model on the CPU backend (the engine takes over in M1.4).
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <random>
#include <sstream>

#include "backend/cpu/cpu_ops.h"
#include "chat/encoding.h"
#include "core/error.h"
#include "model/default_model.h"
#include "model/model.h"
#include "model/model_loader.h"
#include "model/paged_kv.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_locator.h"
#include "tools/command.h"

namespace dsv4::tools {
namespace {

struct Args {
  std::string model, prompt, prompt_ids, tokenizer, backend = "cpu";
  bool chat = false, ignore_eos = false;
  int64_t max_tokens = 16;
  double temperature = 0;
  uint64_t seed = 0;
  int threads = 0;
};

std::vector<int32_t> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      DSV4_CHECK(used == item.size() && v >= 0 && v <= INT32_MAX, "--prompt-ids: \"{}\" is not a token id", item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::logic_error&) {
      fail("--prompt-ids: \"{}\" is not a token id", item);
    }
  }
  return ids;
}

// generate.py's sampler: argmax(softmax(logits / T) / Exp(1) noise), or argmax when T = 0.
// Ids at or above `limit` (the tokenizer's vocabulary) are never chosen.
int32_t sample(const float* logits, int64_t limit, double temperature, std::mt19937_64& rng) {
  int64_t best = 0;
  if (temperature <= 0) {
    for (int64_t i = 1; i < limit; ++i)
      if (logits[i] > logits[best]) best = i;
    return static_cast<int32_t>(best);
  }
  double m = -INFINITY;
  for (int64_t i = 0; i < limit; ++i) m = std::max(m, double{logits[i]} / temperature);
  std::exponential_distribution<double> exp1(1.0);
  double best_v = -1;
  for (int64_t i = 0; i < limit; ++i) {
    const double v = std::exp(double{logits[i]} / temperature - m) / exp1(rng);
    if (v > best_v) best_v = v, best = i;
  }
  return static_cast<int32_t>(best);
}

void run(const Args& a) {
  DSV4_CHECK(a.backend == "cpu", "generate: backend \"{}\" is not available in this build (cpu)", a.backend);
  DSV4_CHECK(a.prompt.empty() != a.prompt_ids.empty(), "generate: give exactly one of --prompt and --prompt-ids");
  DSV4_CHECK(a.max_tokens >= 1, "generate: --max-tokens must be at least 1");
  const std::filesystem::path dir = a.model.empty() ? ensure_default_model() : std::filesystem::path(a.model);
  const LoadedModel m = load_model(dir);
  std::optional<Tokenizer> tok;
  std::vector<int32_t> ids;
  if (!a.prompt.empty()) {
    tok.emplace(Tokenizer::load(locate_tokenizer(TokenizerSearch::from_environment(a.tokenizer, dir.string()))));
    std::string text = a.prompt;
    if (a.chat) {
      chat::EncodeOptions o;
      o.thinking_mode = chat::ThinkingMode::kChat;
      text = chat::encode_messages(nlohmann::ordered_json::array({{{"role", "user"}, {"content", a.prompt}}}), o);
    }
    ids = tok->encode(text);
  } else {
    ids = parse_ids(a.prompt_ids);
  }
  DSV4_CHECK(!ids.empty(), "generate: the prompt is empty");
  const ModelConfig& c = m.config;
  for (int32_t id : ids) DSV4_CHECK(id < c.vocab_size, "generate: prompt token {} >= the model's vocab {}", id, c.vocab_size);
  const int64_t limit = tok ? std::min<int64_t>(tok->vocab_size(), c.vocab_size) : c.vocab_size;
  const int64_t total = static_cast<int64_t>(ids.size()) + a.max_tokens;
  DSV4_CHECK(total <= c.max_position_embeddings, "generate: {} positions exceed the model's {}", total,
             c.max_position_embeddings);

  CpuOps ops(a.threads);
  HostDevice dev;
  Model model(c, m.weights, ops, dev);
  OwnedPagedCache cache(c, 1, total, static_cast<int64_t>(ids.size()));
  cache.add(0, static_cast<int64_t>(ids.size()));
  std::mt19937_64 rng(a.seed);
  std::optional<Detokenizer> detok;
  if (tok) detok.emplace(*tok);
  std::vector<int32_t> out;
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  auto t1 = t0;
  std::string text;
  for (int64_t pos = 0; static_cast<int64_t>(out.size()) < a.max_tokens;) {
    const int64_t n = pos == 0 ? static_cast<int64_t>(ids.size()) : 1;
    cache.allocate(0, n, ids);
    ForwardBatch b;
    b.add(0, pos, ids.data() + pos, n);
    const auto logits = model.forward(b, cache.access());
    if (pos == 0) t1 = clock::now();
    pos += n;
    const int32_t next = sample(logits.data(), limit, a.temperature, rng);
    out.push_back(next);
    ids.push_back(next);
    if (detok) {
      std::string piece = detok->push(next);
      fmt::print("{}", piece);
      std::fflush(stdout);
    }
    if (!a.ignore_eos && next == c.eos_token_id) break;
  }
  const auto t2 = clock::now();
  if (detok) fmt::print("{}\n", detok->finish());
  else fmt::print("{}\n", fmt::join(out, ","));
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  spdlog::info("generate: prompt {} tokens in {:.3f} s ({:.1f} tok/s), generated {} tokens in {:.3f} s ({:.1f} tok/s)",
               ids.size() - out.size(), prefill_s, static_cast<double>(ids.size() - out.size()) / prefill_s,
               out.size(), decode_s, out.size() > 1 ? static_cast<double>(out.size() - 1) / decode_s : 0.0);
}

void setup(CLI::App& cmd) {
  static Args a;
  add_model_option(cmd, a.model, false)->description("model folder (default: the embedded model)");
  cmd.add_option("--prompt", a.prompt, "prompt text (tokenized with the model's tokenizer)");
  cmd.add_option("--prompt-ids", a.prompt_ids, "prompt token ids, comma-separated");
  cmd.add_flag("--chat", a.chat, "wrap --prompt as one user message in the V4 chat encoding");
  cmd.add_option("--max-tokens", a.max_tokens, "tokens to generate")->capture_default_str();
  cmd.add_option("--temperature", a.temperature, "0 = greedy")->capture_default_str();
  cmd.add_option("--seed", a.seed, "sampling seed")->capture_default_str();
  cmd.add_flag("--ignore-eos", a.ignore_eos, "keep generating after the end-of-sequence token");
  cmd.add_option("--tokenizer", a.tokenizer, "tokenizer.json (default: the model's, then the embedded one)");
  cmd.add_option("--backend", a.backend, "cpu")->capture_default_str();
  cmd.add_option("--threads", a.threads, "CPU threads (default: all cores)");
  cmd.callback([] { run(a); });
}

}  // namespace

DSV4_COMMAND("generate", "generate tokens for one prompt", setup);

}  // namespace dsv4::tools
