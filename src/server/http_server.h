// The OpenAI-compatible HTTP server. It listens before the model is loaded (every endpoint answers 503
// "Loading model" until set_ready), so orchestrators can watch /health from the start.
//
//   HttpServer server(config);
//   server.start();                       // binds (throws dsv4::Error naming the address), serves on a thread
//   server.set_ready(engine, tokenizer, info, defaults);
//   server.drain();                       // SIGTERM: 503 to new requests, in-flight finish (or are aborted)
//   server.fail("why");                   // engine failure: in-flight requests answer 500
//
// Middleware: bearer-token auth (--api-key) on /v1/* and the tokenizer endpoints, --max-request-bytes,
// JSON envelopes for cpp-httplib's own errors (404, 413), connection threads from an ElasticThreadPool.
#pragma once

#include <httplib.h>

#include <memory>
#include <thread>

#include "server/server_context.h"

namespace dsv4::server {

class HttpServer {
 public:
  explicit HttpServer(ServerConfig config);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void start();
  int port() const { return port_; }

  // The model is loaded: serve it. Everything passed must outlive the server.
  void set_ready(Engine& engine, const Tokenizer& tokenizer, ModelInfo info, SamplingDefaults defaults);

  // Graceful shutdown: new generation requests get 503, in-flight ones get --shutdown-timeout to finish,
  // then the engine aborts the rest (streams end with finish_reason "abort"); then the listener stops.
  void drain();
  // The engine failed: the in-flight requests end (500), then the listener stops.
  void fail(const std::string& why);
  // Stops listening and joins the connection threads.
  void stop();

  ServerContext& context() { return ctx_; }

 private:
  void install_middleware();
  void wait_for_requests(double seconds);

  ServerContext ctx_;
  httplib::Server svr_;
  int port_ = 0;
  std::thread listener_;
};

}  // namespace dsv4::server
