// The OpenAI-compatible HTTP server. It listens before the model is loaded (every endpoint answers 503
// "Loading model" until set_ready), so orchestrators can watch /health from the start.
//
//   HttpServer server(config);
//   server.start();                       // binds (throws dsv4::Error naming the address), serves on a thread
//   server.set_ready(engine, tokenizer, info, defaults);
//   server.drain();                       // SIGTERM: 503 to new requests, in-flight finish (or are aborted)
//   server.fail("why");                   // engine failure: in-flight requests answer 500
//
// Threads: one RequestReader thread reads every connection (epoll) until it holds a whole request, so no
// other thread waits on a client; request threads then answer through cpp-httplib's router (RoutedServer).
// POST requests (generation, tokenizing) run on one ElasticThreadPool, everything else (/health, /metrics,
// /v1/models, /version) on a small one of its own, so probes and scrapes answer while every generation
// thread is busy or stalled on a slow client.
//
// Middleware: bearer-token auth (--api-key) on /v1/* and the tokenizer endpoints, JSON envelopes for
// cpp-httplib's own errors (404, and 405 with Allow for a known path asked with another method).
#pragma once

#include <memory>

#include "server/elastic_thread_pool.h"
#include "server/request_reader.h"
#include "server/routed_server.h"
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
  // Stops listening, ends streams, joins the request threads and closes every connection.
  void stop();

  ServerContext& context() { return ctx_; }
  // Request threads alive now (both pools), and open connections.
  size_t request_threads() const { return work_pool_.threads() + control_pool_.threads(); }
  size_t connections() const { return reader_ ? reader_->connections() : 0; }

 private:
  void install_middleware();
  bool dispatch(std::shared_ptr<Connection> c);
  void serve(const std::shared_ptr<Connection>& c);
  void wait_for_requests(double seconds);

  ServerContext ctx_;
  RoutedServer svr_;
  ElasticThreadPool work_pool_, control_pool_;
  std::unique_ptr<RequestReader> reader_;
  int port_ = 0;
  bool stopped_ = false;
};

}  // namespace dsv4::server
