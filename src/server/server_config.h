// The options of the HTTP front end (`dsv4 serve` flags of the same names; the engine's are in EngineConfig).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/engine_config.h"

namespace dsv4::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;                      // 0 = any free port (tests)
  std::string served_model_name;        // the name clients send as "model"; default: the model folder's name
  std::string api_key;                  // empty = no authentication
  int64_t default_max_tokens = 4096;    // when a request gives none: min(this, what is left of max_model_len)
  int64_t max_waiting_requests = 1024;  // engine requests queued beyond the running ones; more get 503
  size_t max_request_bytes = size_t{64} << 20;
  double sse_ping_interval = 10;  // seconds without an event before a keep-alive comment
  double shutdown_timeout = 10;   // seconds SIGTERM waits for in-flight requests before aborting them
  double stats_interval = 5;      // seconds between stats log lines (0 = none)
  int64_t max_num_seqs = EngineConfig{}.max_num_seqs;  // the engine's (serve copies it), for admission and threads
  size_t http_threads = 0;                             // request threads at most (0 = max_num_seqs + max_waiting + 64)
  // Connections (request_reader.h). Seconds: an idle connection is closed after keep_alive_timeout, longer
  // than the clients' own pool expiry (httpx, and so the OpenAI client: 5; a load balancer's idle timeout:
  // 60) so that the client always drops an idle connection first: with equal timeouts a client could send
  // its next request on a connection the server is closing, and lose it. A request's line and headers must
  // arrive within header_timeout of their first byte; a body may pause at most body_timeout; a client that
  // takes no response bytes for write_timeout is dropped; a request thread above the pool's minimum exits
  // after thread_idle_timeout without work.
  double keep_alive_timeout = 65;
  double header_timeout = 20;
  double body_timeout = 60;
  double write_timeout = 30;
  double thread_idle_timeout = 10;
  // Request bytes the server holds at once over all connections (0 = max(1 GiB, 4 x max_request_bytes)).
  size_t max_buffered_request_bytes = 0;
};

}  // namespace dsv4::server
