#include "server/http_server.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <chrono>

#include "core/error.h"
#include "server/elastic_thread_pool.h"
#include "server/generation_routes.h"
#include "server/handler_guard.h"
#include "server/info_routes.h"

namespace dsv4::server {
namespace {

// Endpoints reachable without the API key (vLLM protects /v1 only): probes and scrapers.
bool is_public(const std::string& path) { return path == "/health" || path == "/metrics" || path == "/version"; }

bool authorized(const httplib::Request& req, const std::string& key) {
  const std::string header = req.get_header_value("Authorization");
  constexpr std::string_view kBearer = "Bearer ";
  if (header.size() != kBearer.size() + key.size() || header.compare(0, kBearer.size(), kBearer) != 0) return false;
  // Constant time over the key, so the comparison leaks no prefix length.
  unsigned char diff = 0;
  for (size_t i = 0; i < key.size(); ++i) diff |= static_cast<unsigned char>(header[kBearer.size() + i] ^ key[i]);
  return diff == 0;
}

constexpr int kListenBacklog = 4096;  // the kernel caps it at net.core.somaxconn

size_t connection_threads(const ServerConfig& c) {
  if (c.http_threads > 0) return c.http_threads;
  return static_cast<size_t>(c.max_num_seqs + c.max_waiting_requests) + 64;
}

}  // namespace

HttpServer::HttpServer(ServerConfig config) : ctx_(std::move(config)) {
  const size_t threads = connection_threads(ctx_.config);
  svr_.new_task_queue = [threads] { return new ElasticThreadPool(std::min<size_t>(8, threads), threads); };
  svr_.set_payload_max_length(ctx_.config.max_request_bytes);
  svr_.set_keep_alive_max_count(10000);  // benchmark clients reuse connections
  svr_.set_read_timeout(60);             // a large body over a slow link
  svr_.set_write_timeout(30);            // a client that stops reading is dropped after this
  svr_.set_tcp_nodelay(true);            // stream tokens as they come
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
        if (res.status == 413) {
          send_error(res, payload_too_large(ctx_.config.max_request_bytes));
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
  const std::string& host = ctx_.config.host;
  // cpp-httplib 0.11.4 listens with a backlog of 5: a burst of connections (a benchmark's 200 clients)
  // overflows it and clients see resets. Keep the listening socket to widen the backlog after bind.
  int listen_fd = -1;
  svr_.set_socket_options([&listen_fd](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    listen_fd = sock;
  });
  if (ctx_.config.port == 0) {
    port_ = svr_.bind_to_any_port(host);
    DSV4_CHECK(port_ > 0, "serve: cannot listen on {} (any port)", host);
  } else {
    DSV4_CHECK(svr_.bind_to_port(host, ctx_.config.port),
               "serve: cannot listen on {}:{} (in use, or not an address here)", host, ctx_.config.port);
    port_ = ctx_.config.port;
  }
  if (listen_fd >= 0) ::listen(listen_fd, kListenBacklog);
  listener_ = std::thread([this] { svr_.listen_after_bind(); });
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
  if (svr_.is_running() || listener_.joinable()) svr_.stop();
  if (listener_.joinable()) listener_.join();
}

}  // namespace dsv4::server
