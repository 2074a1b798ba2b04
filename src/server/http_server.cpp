#include "server/http_server.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "core/error.h"
#include "server/connection_stream.h"
#include "server/generation_routes.h"
#include "server/handler_guard.h"
#include "server/info_routes.h"
#include "server/listen_socket.h"

namespace dsv4::server {
namespace {

// Endpoints reachable without the API key (vLLM protects /v1 only): probes and scrapers.
bool is_public(const std::string& path) {
  return path == "/health" || path == "/ping" || path == "/metrics" || path == "/version";
}

// `given` equals `key`, in time constant over the key (the comparison leaks no prefix length).
bool same_key(std::string_view given, const std::string& key) {
  if (given.size() != key.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(given[i] ^ key[i]);
  return diff == 0;
}

// "Authorization: Bearer KEY" (OpenAI's clients), or "x-api-key: KEY" (Anthropic's).
bool authorized(const httplib::Request& req, const std::string& key) {
  const std::string header = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (header.size() > kBearer.size() && header.compare(0, kBearer.size(), kBearer) == 0 &&
      same_key(std::string_view(header).substr(kBearer.size()), key)) {
    return true;
  }
  return req.has_header("x-api-key") && same_key(req.get_header_value("x-api-key"), key);
}

size_t max_request_threads(const ServerConfig& c) {
  if (c.http_threads > 0) return c.http_threads;
  return static_cast<size_t>(c.max_num_seqs + c.max_waiting_requests) + 64;
}

// The control pool answers probes, scrapes and model listings, which never wait on the engine: a few
// threads suffice, and keeping them apart means they never queue behind generations.
constexpr size_t kControlThreads = 8;

std::chrono::milliseconds millis(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

ReaderOptions reader_options(const ServerConfig& c) {
  const size_t buffered = c.max_buffered_request_bytes > 0 ? c.max_buffered_request_bytes
                                                           : std::max(size_t{1} << 30, 4 * c.max_request_bytes);
  return {c.max_request_bytes, buffered, c.keep_alive_timeout, c.header_timeout, c.body_timeout};
}

}  // namespace

HttpServer::HttpServer(ServerConfig config)
    : ctx_(std::move(config)),
      work_pool_("http", std::min<size_t>(8, max_request_threads(ctx_.config)), max_request_threads(ctx_.config),
                 millis(ctx_.config.thread_idle_timeout)),
      control_pool_("http control", 1, kControlThreads, millis(ctx_.config.thread_idle_timeout)) {
  // Benchmark clients reuse connections; the Keep-Alive header announces the reader's idle timeout.
  svr_.set_keep_alive_max_count(10000);
  svr_.set_keep_alive_timeout(static_cast<time_t>(ctx_.config.keep_alive_timeout));
  install_middleware();
  add_info_routes(svr_, ctx_);
  add_generation_routes(svr_, ctx_);
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::install_middleware() {
  svr_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (ctx_.config.api_key.empty() || is_public(req.path) || authorized(req, ctx_.config.api_key)) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    send_error(res, unauthorized());
    return httplib::Server::HandlerResponse::Handled;
  });
  // cpp-httplib's own errors come without a body; handlers' errors already have one.
  svr_.set_error_handler(
      httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.content_provider_) return httplib::Server::HandlerResponse::Unhandled;
        const std::string allowed = res.status == 404 ? svr_.allowed_methods(req.path) : std::string();
        if (!allowed.empty()) {
          send_error(res, method_not_allowed(req.method, req.path, allowed));
          res.set_header("Allow", allowed);
        } else if (res.status == 404) {
          send_error(res, route_not_found(req.method, req.path));
        } else {
          send_error(res, ApiError(res.status, res.status < 500 ? "invalid_request_error" : "server_error",
                                   fmt::format("HTTP error {}", res.status)));
        }
        return httplib::Server::HandlerResponse::Handled;
      }));
  svr_.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "unknown error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    send_error(res, internal_error(what));
  });
}

void HttpServer::start() {
  raise_descriptor_limit();
  const int fd = listen_socket(ctx_.config.host, ctx_.config.port);
  port_ = bound_port(fd);
  svr_.set_running(true);
  reader_ = std::make_unique<RequestReader>(fd, reader_options(ctx_.config),
                                            [this](std::shared_ptr<Connection> c) { return dispatch(std::move(c)); });
  reader_->start();
}

// Generations (and tokenizing, which can take as long for a large prompt) on the work pool; the rest on
// the control pool.
bool HttpServer::dispatch(std::shared_ptr<Connection> c) {
  ElasticThreadPool& pool = c->head().method == "POST" ? work_pool_ : control_pool_;
  return pool.enqueue([this, c = std::move(c)] { serve(c); });
}

void HttpServer::serve(const std::shared_ptr<Connection>& c) {
  ConnectionStream stream(*c, millis(ctx_.config.write_timeout));
  // Draining or failed: the connection carries no further request.
  const bool last = ctx_.state() == ServerState::kDraining || ctx_.state() == ServerState::kFailed;
  bool keep_alive = false;
  {
    ProbeScope scope(c->watch());
    keep_alive = svr_.serve(stream, last);
  }
  c->watch()->detach();
  reader_->release(c, keep_alive);
}

void HttpServer::set_ready(Engine& engine, const Tokenizer& tokenizer, ModelInfo info, SamplingDefaults defaults) {
  ctx_.engine = &engine;
  ctx_.tokenizer = &tokenizer;
  ctx_.model = std::move(info);
  ctx_.defaults = defaults;
  ctx_.set_state(ServerState::kReady);  // publishes the fields above
}

void HttpServer::wait_for_requests(double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (ctx_.admission.http_requests() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void HttpServer::drain() {
  if (ctx_.state() == ServerState::kReady) ctx_.set_state(ServerState::kDraining);
  const int64_t in_flight = ctx_.admission.http_requests();
  if (in_flight > 0) {
    spdlog::info("shutdown: waiting up to {} s for {} request(s) in flight", ctx_.config.shutdown_timeout, in_flight);
  }
  wait_for_requests(ctx_.config.shutdown_timeout);
  if (ctx_.admission.http_requests() > 0) {
    spdlog::warn("shutdown: aborting {} request(s) still in flight", ctx_.admission.http_requests());
  }
  if (ctx_.engine != nullptr) ctx_.engine->shutdown();  // aborts whatever is left
  wait_for_requests(5);                                 // let the handlers send their last words
  stop();
}

void HttpServer::fail(const std::string& why) {
  ctx_.set_failure(why);
  ctx_.set_state(ServerState::kFailed);
  if (ctx_.engine != nullptr) ctx_.engine->shutdown();
  wait_for_requests(5);
  stop();
}

void HttpServer::stop() {
  if (stopped_) return;
  stopped_ = true;
  if (reader_) reader_->close_listener();  // no new connections
  svr_.set_running(false);                 // streams end before their next chunk
  work_pool_.shutdown();                   // requests in hand are answered
  control_pool_.shutdown();
  if (reader_) reader_->stop();  // closes every connection
}

}  // namespace dsv4::server
