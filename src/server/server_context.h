// What every handler shares: the configuration, the lifecycle state, the engine and tokenizer once the
// model is loaded, the served model's facts, the admission counts and the request metrics.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "engine/engine.h"
#include "server/admission.h"
#include "server/generation_options.h"
#include "server/grammar_cache.h"
#include "server/request_metrics.h"
#include "server/server_config.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

// kLoading -> kReady -> kDraining (SIGTERM) or kFailed (the engine failed).
enum class ServerState { kLoading, kReady, kDraining, kFailed };

struct ModelInfo {
  std::string name;  // what clients send as "model"
  std::string path;  // the model folder
  std::string backend;
  int64_t max_model_len = 0;
  int32_t eos_token_id = 1;
  int64_t created = 0;  // unix seconds the server became ready
};

class ServerContext {
 public:
  explicit ServerContext(ServerConfig c)
      : config(std::move(c)), admission(config.max_num_seqs, config.max_waiting_requests) {}

  const ServerConfig config;
  Admission admission;
  RequestMetrics metrics;
  GrammarCache grammars;  // structured output's compiled grammars

  // Set once by the server before the state becomes kReady; read-only afterwards.
  Engine* engine = nullptr;
  const Tokenizer* tokenizer = nullptr;
  SamplingDefaults defaults;
  ModelInfo model;

  ServerState state() const { return state_.load(); }
  void set_state(ServerState s) { state_.store(s); }
  bool accepting() const { return state() == ServerState::kReady; }
  void set_failure(std::string why);
  std::string failure() const;

 private:
  std::atomic<ServerState> state_{ServerState::kLoading};
  mutable std::mutex mu_;
  std::string failure_;
};

// The 503 of a server that does not serve now, for every endpoint that needs the model: loading ("Loading
// model", docs/server.md), draining, or failed (with the engine's failure).
void check_serving(const ServerContext& ctx);

}  // namespace dsv4::server
