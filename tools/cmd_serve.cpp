// dsv4 serve [MODEL] [flags]: the OpenAI-compatible server (src/server). Without MODEL it serves the
// embedded default model (the `serve` preset, created under DSV4_HOME on first use, with the embedded
// tokenizer). It listens at once (/health answers 503 while the model loads), shows a progress bar while
// the weights load, prints a one-screen summary with a curl line, then logs a stats line every
// --stats-interval seconds. SIGTERM/SIGINT: graceful shutdown, exit 0. Engine failure: exit 1.
#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <optional>

#include "core/error.h"
#include "core/progress_bar.h"
#include "engine/cache_sizing.h"
#include "engine/engine.h"
#include "engine/model_runner.h"
#include "model/model_loader.h"
#include "model_tools/default_model.h"
#include "server/generation_config.h"
#include "server/http_server.h"
#include "server/startup_summary.h"
#include "server/stats_logger.h"
#include "tokenizer/tokenizer_locator.h"
#include "tools/command.h"
#include "tools/engine_flags.h"
#include "tools/load_flags.h"

namespace dsv4::tools {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using server::HttpServer;
using server::ServerConfig;

constexpr const char* kDefaultModelName = "dsv4-serve";

struct Args {
  std::string model, tokenizer;
  bool log_stats = true;
  int64_t fail_after_steps = 0;  // testing: the engine fails at this step
  EngineFlags flags;
  LoadFlags load;
  EngineConfig engine;  // flags.engine_config(), then what the model and tokenizer set
  ServerConfig server;
};

// Testing aid (--fail-after-steps): an executor that fails its Nth step, as a broken device would.
class FailingExecutor final : public Executor {
 public:
  FailingExecutor(std::unique_ptr<Executor> inner, int64_t fail_at) : inner_(std::move(inner)), fail_at_(fail_at) {}
  void add_request(RequestId id, const SamplingParams& p, std::span<const int32_t> prompt, uint64_t seed) override {
    inner_->add_request(id, p, prompt, seed);
  }
  void remove_request(RequestId id) override { inner_->remove_request(id); }
  StepGraphStats graph_stats() const override { return inner_->graph_stats(); }
  std::vector<SampledToken> execute(const Schedule& s) override {
    DSV4_CHECK(++steps_ < fail_at_, "injected failure at step {} (--fail-after-steps)", steps_);
    return inner_->execute(s);
  }
  std::unordered_map<RequestId, std::vector<PromptLogprob>> take_prompt_logprobs() override {
    return inner_->take_prompt_logprobs();
  }

 private:
  std::unique_ptr<Executor> inner_;
  int64_t fail_at_, steps_ = 0;
};

struct StopOnExit {
  HttpServer& server;
  ~StopOnExit() { server.stop(); }
};

// Reads the checkpoint files once so that the first requests do not wait on page faults, with a progress
// bar. Skipped when they would not fit in half the memory (the mapping then pages in as used).
void prefetch_weights(const fs::path& dir) {
  std::vector<fs::path> files;
  int64_t total = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().extension() == ".safetensors") {
      files.push_back(e.path());
      total += static_cast<int64_t>(e.file_size());
    }
  }
  std::sort(files.begin(), files.end());
  const int64_t ram = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGE_SIZE);
  if (files.empty() || total > ram / 2) return;
  ProgressBar bar("Loading weights", total, "MiB", 1 << 20);
  std::vector<char> buf(size_t{8} << 20);
  int64_t done = 0;
  for (const fs::path& f : files) {
    const int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) > 0;) bar.update(done += n);
    ::close(fd);
  }
  bar.finish();
}

std::unique_ptr<Engine> make_engine(const LoadedModel& m, const EngineConfig& config, int64_t fail_after_steps) {
  if (fail_after_steps <= 0) return std::make_unique<Engine>(m.config, m.weights, config);
  spdlog::warn("serve: --fail-after-steps {}: the engine will fail on purpose (testing)", fail_after_steps);
  const int64_t vocab_limit = config.vocab_limit > 0 ? std::min(config.vocab_limit, m.config.vocab_size) : 0;
  return std::make_unique<Engine>(
      m.config, config,
      [&m, config, vocab_limit, fail_after_steps](KvCacheManager& kv, Backend& backend) -> std::unique_ptr<Executor> {
        auto runner = std::make_unique<ModelRunner>(m.config, m.weights, kv, config.kv_dtypes, backend, vocab_limit);
        return std::make_unique<FailingExecutor>(std::move(runner), fail_after_steps);
      },
      true);
}

server::StartupFacts startup_facts(const Args& a, const Engine& engine, const ModelConfig& model,
                                   const server::ModelInfo& info, const fs::path& tokenizer, int port,
                                   double load_seconds) {
  const KvCacheSetup& kv = engine.cache();
  server::StartupFacts f;
  f.model_name = info.name;
  f.model_path = info.path;
  f.tokenizer_path = tokenizer.string();
  f.backend =
      engine.config().backend + " (numerics " + engine.config().numerics + "), " + engine.config().parallel.describe();
  const ParallelConfig& pc = engine.config().parallel;
  if (pc.world() > 1) {
    f.parallel = describe_layout(model, plan_parallel(model, pc));
    f.rank_weight_bytes = engine.config().weight_bytes;
  }
  f.kv_dtypes = fmt::format("attention {}, indexer {}", kv_cache_dtype_name(engine.config().kv_dtypes.cache),
                            indexer_dtype_name(engine.config().kv_dtypes.indexer));
  f.max_model_len = engine.max_model_len();
  f.max_num_seqs = engine.config().max_num_seqs;
  f.max_num_batched_tokens = engine.config().max_num_batched_tokens;
  f.kv_cache_memory = kv.kv_cache_memory;
  f.pool_bytes = kv.pool_bytes;
  f.kv_tokens = kv.largest_request;
  f.offload_bytes = engine.config().kv_offload_bytes;
  f.host_tier_tokens = kv.host_tier_tokens;
  f.prefix_caching = engine.config().enable_prefix_caching;
  for (size_t b = 0; b < kv.layout.buckets.size(); ++b) {
    server::PoolSummary p{kv.layout.buckets[b].page_bytes, b < kv.pool_pages.size() ? kv.pool_pages[b] : 0, ""};
    for (const int u : kv.layout.buckets[b].units) {
      p.units += (p.units.empty() ? "" : ", ") + kv.layout.units[static_cast<size_t>(u)].name;
    }
    f.pools.push_back(p);
  }
  f.host = a.server.host;
  f.port = port;
  f.api_key = !a.server.api_key.empty();
  f.load_seconds = load_seconds;
  return f;
}

// Waits for a signal or an engine failure, logging stats meanwhile; returns the exit code.
int serve_until_stopped(HttpServer& server, const Engine& engine, const sigset_t& signals, double stats_interval) {
  std::vector<server::StatsLogger> stats;  // one a replica, as vLLM logs its engines
  for (int d = 0; d < engine.replicas(); ++d) {
    stats.emplace_back(d);
    stats.back().log(engine.replica_stats(d));
  }
  auto next_stats =
      Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(stats_interval));
  for (;;) {
    const timespec wait{0, 100'000'000};
    const int sig = ::sigtimedwait(&signals, nullptr, &wait);
    if (sig == SIGTERM || sig == SIGINT) {
      spdlog::info("serve: {} received: shutting down gracefully", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      server.drain();
      spdlog::info("serve: stopped");
      return 0;
    }
    if (!engine.healthy()) {
      spdlog::error("serve: the engine failed; answering in-flight requests with 500 and exiting");
      server.fail("a step failed (see the log above)");
      return 1;
    }
    if (stats_interval > 0 && Clock::now() >= next_stats) {
      for (int d = 0; d < engine.replicas(); ++d) stats[static_cast<size_t>(d)].log(engine.replica_stats(d));
      next_stats += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(stats_interval));
    }
  }
}

void run(Args& a) {
  if (print_engine_config_if_asked(a.flags)) return;
  a.engine = a.flags.engine_config();
  a.server.max_num_seqs = a.engine.max_num_seqs;
  if (!a.log_stats) a.server.stats_interval = 0;

  // Signals are taken synchronously by the main loop: block them before any thread starts.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);  // a client that hung up is seen as a failed write

  HttpServer server(a.server);
  server.start();
  spdlog::info("serve: listening on {} (loading the model; /health answers 503 until ready)",
               server::base_url(a.server.host, server.port()));

  const auto t0 = Clock::now();
  const fs::path dir = a.model.empty() ? ensure_default_model() : fs::path(a.model);
  const LoadOptions load = a.load.options();
  if (load.format == LoadFormat::kAuto) prefetch_weights(dir);
  const LoadedModel m = load_model(dir, load);
  const fs::path tok_path = locate_tokenizer(TokenizerSearch::from_environment(a.tokenizer, dir.string()));
  const Tokenizer tokenizer = Tokenizer::load(tok_path);

  a.engine.vocab_limit = tokenizer.vocab_size();
  std::unique_ptr<Engine> engine = make_engine(m, a.engine, a.fail_after_steps);
  // Declared after the engine, so destroyed before it: no handler may run on a destroyed engine, even when
  // something below throws.
  const StopOnExit stop_first{server};

  server::ModelInfo info;
  info.name = !a.server.served_model_name.empty() ? a.server.served_model_name
              : a.model.empty()                   ? std::string(kDefaultModelName)
                                                  : a.model;
  info.path = fs::absolute(dir).string();
  info.backend = engine->config().backend;
  info.max_model_len = engine->max_model_len();
  info.eos_token_id = static_cast<int32_t>(m.config.eos_token_id);
  info.created =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  const double load_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  server::StartupFacts facts = startup_facts(a, *engine, m.config, info, tok_path, server.port(), load_seconds);
  facts.weights = load.describe();
  server.set_ready(*engine, tokenizer, std::move(info), server::load_sampling_defaults(dir));
  fmt::print(stderr, "\n{}\n", server::startup_summary(facts));

  set_exit_code(serve_until_stopped(server, *engine, signals, a.server.stats_interval));
}

void add_server_options(CLI::App& cmd, Args& a) {
  ServerConfig& s = a.server;
  cmd.add_option("--host", s.host, "address to listen on (0.0.0.0: all interfaces)")->capture_default_str();
  cmd.add_option("--port", s.port, "port to listen on (0: any free port)")->capture_default_str();
  cmd.add_option("--served-model-name", s.served_model_name,
                 "the model name clients send (default: MODEL as given, or dsv4-serve for the embedded model)");
  cmd.add_option("--api-key", s.api_key, "require \"Authorization: Bearer KEY\" on /v1/* and the tokenizer endpoints");
  cmd.add_option("--tokenizer", a.tokenizer, "tokenizer.json (default: DSV4_TOKENIZER, the model's, the embedded one)");
  cmd.add_option("--default-max-tokens", s.default_max_tokens,
                 "max_tokens of a request that gives none (capped by what is left of max_model_len)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--max-waiting-requests", s.max_waiting_requests,
                 "requests waiting beyond --max-num-seqs running; more are answered 503")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd.add_option("--max-request-bytes", s.max_request_bytes, "largest request body (413 beyond)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  cmd.add_option("--sse-ping-interval", s.sse_ping_interval, "seconds of silence before an SSE keep-alive comment")
      ->capture_default_str();
  cmd.add_option("--timeout-keep-alive", s.keep_alive_timeout,
                 "seconds an idle connection stays open (keep it above the clients' and load balancers' own)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd.add_option("--shutdown-timeout", s.shutdown_timeout,
                 "seconds SIGTERM waits for in-flight requests before aborting them")
      ->capture_default_str();
  cmd.add_option("--stats-interval", s.stats_interval, "seconds between stats log lines")->capture_default_str();
  cmd.add_flag("!--disable-log-stats", a.log_stats, "no periodic stats line");
  cmd.add_option("--http-threads", s.http_threads,
                 "threads answering POST requests at most (default: max-num-seqs + max-waiting-requests + 64)");
  cmd.add_option("--fail-after-steps", a.fail_after_steps, "testing: make the engine fail at this step")
      ->group("");  // hidden
}

// The flags of vLLM's DeepSeek-V4 command line (its recipe: --tokenizer-mode, --tool-call-parser and
// --reasoning-parser deepseek_v4, --enable-auto-tool-choice, --trust-remote-code), so that it runs here
// unchanged. What they switch on is always on: the V4 encoder, DSML tool calls and reasoning are parsed
// for every request; another parser's name is an error that says so.
void add_vllm_flags(CLI::App& cmd) {
  static std::string tokenizer_mode, tool_parser, reasoning_parser;
  static bool auto_tools = false, remote_code = false;
  const auto only_v4 = [](const char* what) {
    return CLI::Validator(
        [what](const std::string& v) {
          return v == "deepseek_v4"
                     ? std::string()
                     : fmt::format("dsv4 {} itself, for DeepSeek V4 alone: deepseek_v4, not {}", what, v);
        },
        "deepseek_v4");
  };
  constexpr const char* kGroup = "vLLM's DeepSeek-V4 flags (always on)";
  cmd.add_option("--tokenizer-mode", tokenizer_mode, "auto or deepseek_v4: the V4 chat encoder")
      ->check(CLI::IsMember({"auto", "deepseek_v4"}))
      ->group(kGroup);
  cmd.add_option("--tool-call-parser", tool_parser, "deepseek_v4: DSML tool calls")
      ->check(only_v4("parses DSML tool calls"))
      ->group(kGroup);
  cmd.add_option("--reasoning-parser", reasoning_parser, "deepseek_v4: the thinking block")
      ->check(only_v4("parses the thinking block"))
      ->group(kGroup);
  cmd.add_flag("--enable-auto-tool-choice", auto_tools, "tool_choice \"auto\" (always taken)")->group(kGroup);
  cmd.add_flag("--trust-remote-code", remote_code, "no effect: the model is this program's code")->group(kGroup);
}

void setup(CLI::App& cmd) {
  static Args a;
  add_model_option(cmd, a.model, false)->description("model folder (default: the embedded model)");
  add_server_options(cmd, a);
  add_vllm_flags(cmd);
  add_engine_flags(cmd, a.flags);
  add_load_flags(cmd, a.load);
  cmd.callback([] { run(a); });
}

}  // namespace

DSV4_COMMAND("serve", "OpenAI-compatible HTTP server (without MODEL: the embedded default model)", setup);

}  // namespace dsv4::tools
