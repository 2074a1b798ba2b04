// dsv4 generate [MODEL] --prompt TEXT [--chat] | --prompt-ids 1,2,3 | --prompts-file F  --max-tokens N
// [sampling flags] [engine flags]: offline generation through the engine (continuous batching, prefix
// caching, chunked prefill) on the CPU backend. One prompt streams its text (or prints its ids); a prompts
// file prints one line per prompt, in order. Throughput goes to the log (stderr).
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "chat/encoding.h"
#include "core/error.h"
#include "engine/engine.h"
#include "model/model_loader.h"
#include "model_tools/default_model.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_locator.h"
#include "tools/command.h"
#include "tools/engine_flags.h"
#include "tools/load_flags.h"

namespace dsv4::tools {
namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::string model, prompt, prompt_ids, prompts_file, tokenizer;
  bool chat = false;
  SamplingParams sampling;
  std::optional<uint64_t> seed;
  std::string logit_bias, stop_token_ids;
  EngineFlags flags;
  EngineConfig engine;  // flags.engine_config(), then what the tokenizer sets
  LoadFlags load;
};

int32_t parse_id(const std::string& item, const char* what) {
  try {
    size_t used = 0;
    const long v = std::stol(item, &used);
    DSV4_CHECK(used == item.size() && v >= 0 && v <= INT32_MAX, "{}: \"{}\" is not a token id", what, item);
    return static_cast<int32_t>(v);
  } catch (const std::logic_error&) {
    fail("{}: \"{}\" is not a token id", what, item);
  }
}

std::vector<int32_t> parse_ids(const std::string& s, const char* what) {
  std::vector<int32_t> ids;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) ids.push_back(parse_id(item, what));
  return ids;
}

// "id:bias,id:bias"
std::unordered_map<int32_t, float> parse_logit_bias(const std::string& s) {
  std::unordered_map<int32_t, float> bias;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    const auto colon = item.find(':');
    DSV4_CHECK(colon != std::string::npos, "--logit-bias: \"{}\" is not id:bias", item);
    try {
      bias[parse_id(item.substr(0, colon), "--logit-bias")] = std::stof(item.substr(colon + 1));
    } catch (const std::logic_error&) {
      fail("--logit-bias: \"{}\" is not id:bias", item);
    }
  }
  return bias;
}

// One prompt: ids given directly, or text for the tokenizer.
struct Prompt {
  std::optional<std::string> text;
  std::vector<int32_t> ids;
};

// A prompts file has one prompt per line: a JSON array of ids, a JSON string, or plain text.
std::vector<Prompt> read_prompts_file(const std::string& path) {
  std::ifstream in(path);
  DSV4_CHECK(in, "--prompts-file: cannot open {}", path);
  std::vector<Prompt> prompts;
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    const auto j = nlohmann::json::parse(line, nullptr, false);
    Prompt p;
    if (j.is_array()) {
      for (const auto& v : j) {
        DSV4_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX,
                   "--prompts-file {} line {}: {} is not a token id", path, n, v.dump());
        p.ids.push_back(v.get<int32_t>());
      }
    } else {
      p.text = j.is_string() ? j.get<std::string>() : line;
    }
    prompts.push_back(std::move(p));
  }
  DSV4_CHECK(!prompts.empty(), "--prompts-file {} holds no prompt", path);
  return prompts;
}

std::vector<Prompt> gather_prompts(const Args& a) {
  const int given = !a.prompt.empty() + !a.prompt_ids.empty() + !a.prompts_file.empty();
  DSV4_CHECK(given == 1, "generate: give exactly one of --prompt, --prompt-ids and --prompts-file");
  if (!a.prompt.empty()) return {Prompt{a.prompt, {}}};
  if (!a.prompt_ids.empty()) return {Prompt{std::nullopt, parse_ids(a.prompt_ids, "--prompt-ids")}};
  return read_prompts_file(a.prompts_file);
}

void tokenize(std::vector<Prompt>& prompts, const Tokenizer* tok, bool chat) {
  for (Prompt& p : prompts) {
    if (!p.text) continue;
    std::string text = *p.text;
    if (chat) {
      chat::EncodeOptions o;
      o.thinking_mode = chat::ThinkingMode::kChat;
      text = chat::encode_messages(nlohmann::ordered_json::array({{{"role", "user"}, {"content", *p.text}}}), o);
    }
    p.ids = tok->encode(text);
    DSV4_CHECK(!p.ids.empty(), "generate: a prompt is empty after tokenization");
  }
}

struct Result {
  std::vector<int32_t> ids;
  RequestOutput last;
  std::optional<Clock::time_point> first_token;
};

// Reads every stream until all finish; one prompt with a tokenizer streams its text as it comes.
std::vector<Result> collect(std::vector<std::shared_ptr<RequestStream>>& streams, Detokenizer* live) {
  std::vector<Result> results(streams.size());
  size_t done = 0;
  while (done < streams.size()) {
    bool progressed = false;
    for (size_t i = 0; i < streams.size(); ++i) {
      if (results[i].last.finished) continue;
      RequestOutput out = streams[i]->read(std::chrono::milliseconds(streams.size() == 1 ? 100 : 0));
      if (!out.token_ids.empty() && !results[i].first_token) results[i].first_token = Clock::now();
      for (int32_t id : out.token_ids) {
        results[i].ids.push_back(id);
        if (live != nullptr) fmt::print("{}", live->push(id));
      }
      if (live != nullptr) std::fflush(stdout);
      progressed = progressed || !out.token_ids.empty() || out.finished;
      if (out.finished) ++done;
      results[i].last = std::move(out);
    }
    if (!progressed && streams.size() > 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return results;
}

void report(const std::vector<Result>& results, Clock::time_point t0, Clock::time_point t2) {
  int64_t prompt = 0, cached = 0, generated = 0, firsts = 0;
  auto t1 = t0;
  for (const Result& r : results) {
    prompt += r.last.usage.prompt_tokens;
    cached += r.last.usage.cached_tokens;
    generated += r.last.usage.completion_tokens;
    if (r.first_token) t1 = std::max(t1, *r.first_token), ++firsts;
  }
  const double prefill_s = std::chrono::duration<double>(t1 - t0).count();
  const double decode_s = std::chrono::duration<double>(t2 - t1).count();
  const int64_t later = generated - firsts;  // tokens after each request's first
  spdlog::info(
      "generate: {} prompt(s), prompt {} tokens ({} from the prefix cache) in {:.3f} s ({:.1f} tok/s), generated {} "
      "tokens in {:.3f} s ({:.1f} tok/s after the first tokens)",
      results.size(), prompt, cached, prefill_s, prefill_s > 0 ? static_cast<double>(prompt) / prefill_s : 0.0,
      generated, decode_s, decode_s > 0 && later > 0 ? static_cast<double>(later) / decode_s : 0.0);
}

void run(Args& a) {
  if (print_engine_config_if_asked(a.flags)) return;
  a.engine = a.flags.engine_config();
  std::vector<Prompt> prompts = gather_prompts(a);
  const std::filesystem::path dir = a.model.empty() ? ensure_default_model() : std::filesystem::path(a.model);
  a.load.seed = a.seed;  // vLLM's --seed: the sampling's and the dummy weights'
  const LoadedModel m = load_model(dir, a.load.options());
  const bool any_text = std::any_of(prompts.begin(), prompts.end(), [](const Prompt& p) { return p.text.has_value(); });
  std::optional<Tokenizer> tok;
  if (any_text || !a.tokenizer.empty()) {
    tok.emplace(Tokenizer::load(locate_tokenizer(TokenizerSearch::from_environment(a.tokenizer, dir.string()))));
  }
  tokenize(prompts, tok ? &*tok : nullptr, a.chat);

  a.sampling.seed = a.seed;
  if (!a.logit_bias.empty()) a.sampling.logit_bias = parse_logit_bias(a.logit_bias);
  if (!a.stop_token_ids.empty()) a.sampling.stop_token_ids = parse_ids(a.stop_token_ids, "--stop-token-ids");
  if (tok) a.engine.vocab_limit = tok->vocab_size();
  Engine engine(m.config, m.weights, a.engine);

  const auto t0 = Clock::now();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const Prompt& p : prompts) streams.push_back(engine.add_request({p.ids, a.sampling, {}}));
  std::optional<Detokenizer> live;
  if (prompts.size() == 1 && prompts[0].text) live.emplace(*tok);
  const std::vector<Result> results = collect(streams, live ? &*live : nullptr);
  const auto t2 = Clock::now();

  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    DSV4_CHECK(r.last.finish_reason != FinishReason::kError, "generate: prompt {} failed: {}", i, r.last.error);
    if (live) {
      fmt::print("{}\n", live->finish());
    } else if (prompts[i].text) {
      fmt::print("{}\n", nlohmann::json(tok->decode(r.ids)).dump());
    } else {
      fmt::print("{}\n", fmt::join(r.ids, ","));
    }
  }
  std::fflush(stdout);  // the text before the log line
  report(results, t0, t2);
}

void add_sampling_options(CLI::App& cmd, Args& a) {
  SamplingParams& s = a.sampling;
  s.temperature = 0;  // generate defaults to greedy
  cmd.add_option("--max-tokens", s.max_tokens, "tokens to generate per prompt")->capture_default_str();
  cmd.add_option("--temperature", s.temperature, "0 = greedy")->capture_default_str();
  cmd.add_option("--top-k", s.top_k, "0 = all")->capture_default_str();
  cmd.add_option("--top-p", s.top_p, "nucleus mass")->capture_default_str();
  cmd.add_option("--min-p", s.min_p, "drop tokens below min-p x the top probability")->capture_default_str();
  cmd.add_option("--seed", a.seed, "sampling seed (per request; default: random)");
  cmd.add_option("--repetition-penalty", s.repetition_penalty, "on prompt and output tokens")->capture_default_str();
  cmd.add_option("--presence-penalty", s.presence_penalty, "on output tokens")->capture_default_str();
  cmd.add_option("--frequency-penalty", s.frequency_penalty, "per occurrence in the output")->capture_default_str();
  cmd.add_option("--logit-bias", a.logit_bias, "id:bias,id:bias");
  cmd.add_flag("--ignore-eos", s.ignore_eos, "keep generating after the end-of-sequence token");
  cmd.add_option("--min-tokens", s.min_tokens, "no EOS or stop id before this many tokens")->capture_default_str();
  cmd.add_option("--stop-token-ids", a.stop_token_ids, "ids that end generation, comma-separated");
}

void setup(CLI::App& cmd) {
  static Args a;
  add_model_option(cmd, a.model, false)->description("model folder (default: the embedded model)");
  cmd.add_option("--prompt", a.prompt, "prompt text (tokenized with the model's tokenizer)");
  cmd.add_option("--prompt-ids", a.prompt_ids, "prompt token ids, comma-separated");
  cmd.add_option("--prompts-file", a.prompts_file,
                 "one prompt per line: a JSON array of ids, a JSON string, or plain text");
  cmd.add_flag("--chat", a.chat, "wrap text prompts as one user message in the V4 chat encoding");
  cmd.add_option("--tokenizer", a.tokenizer, "tokenizer.json (default: the model's, then the embedded one)");
  add_sampling_options(cmd, a);
  add_engine_flags(cmd, a.flags);
  add_load_flags(cmd, a.load);
  cmd.callback([] { run(a); });
}

}  // namespace

DSV4_COMMAND("generate", "generate tokens through the engine (one prompt or a prompts file)", setup);

}  // namespace dsv4::tools
