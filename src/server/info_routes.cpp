#include "server/info_routes.h"

#include "chat/encoding.h"
#include "core/error.h"
#include "core/version.h"
#include "server/chat_request.h"
#include "server/handler_guard.h"
#include "server/metrics_page.h"
#include "server/sse.h"

namespace dsv4::server {
namespace {

void send_json(httplib::Response& res, const Json& j) { res.set_content(dump_json(j), "application/json"); }

void health(const ServerContext& ctx, httplib::Response& res) {
  check_serving(ctx);
  if (!ctx.engine->healthy()) throw unavailable("The engine failed");
  send_json(res, Json{{"status", "ok"}});
}

void require_model(const ServerContext& ctx) {
  // The state first: the engine and tokenizer are published before the state leaves kLoading.
  if (ctx.state() == ServerState::kLoading) throw unavailable("Loading model");
}

Json model_card(const ServerContext& ctx) {
  return Json{{"id", ctx.model.name},
              {"object", "model"},
              {"created", ctx.model.created},
              {"owned_by", "dsv4"},
              {"root", ctx.model.path},
              {"parent", nullptr},
              {"max_model_len", ctx.model.max_model_len},
              {"vocab_size", ctx.tokenizer->vocab_size()}};
}

// vLLM's /tokenize: {"prompt": text} or {"messages": [...]} (V4 chat encoding) -> {"count", "max_model_len",
// "tokens"}; "return_token_strs" adds the tokens' texts.
void tokenize(const ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  require_model(ctx);
  const Json body = parse_request_body(req.body);
  const RequestFields f(body);
  std::string text;
  if (const Json* messages = f.array("messages")) {
    try {
      text = chat::encode_messages(*messages, thinking_options(f));
    } catch (const Error& e) {
      bad_request("messages", "{}", e.what());
    }
  } else if (const auto prompt = f.string("prompt")) {
    text = *prompt;
  } else {
    bad_request("prompt", "'prompt' (a string) or 'messages' is required");
  }
  const std::vector<int32_t> ids = ctx.tokenizer->encode(text);
  Json out = {{"count", ids.size()}, {"max_model_len", ctx.model.max_model_len}, {"tokens", ids}};
  if (f.boolean("return_token_strs").value_or(false)) {
    Json strs = Json::array();
    for (const int32_t id : ids) strs.push_back(ctx.tokenizer->id_to_token(id));
    out["token_strs"] = std::move(strs);
  }
  send_json(res, out);
}

void detokenize(const ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  require_model(ctx);
  const Json body = parse_request_body(req.body);
  const Json* tokens = RequestFields(body).array("tokens");
  if (tokens == nullptr) bad_request("tokens", "'tokens' (an array of token ids) is required");
  std::vector<int32_t> ids;
  for (const Json& t : *tokens) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= ctx.tokenizer->vocab_size()) {
      bad_request("tokens", "'tokens' must hold token ids in [0, {}), got {}", ctx.tokenizer->vocab_size(),
                  json_excerpt(t));
    }
    ids.push_back(t.get<int32_t>());
  }
  send_json(res, Json{{"prompt", ctx.tokenizer->decode(ids)}});
}

void metrics(const ServerContext& ctx, httplib::Response& res) {
  require_model(ctx);
  const ServerGauges g{ctx.model.name, ctx.admission.http_requests(), ctx.admission.engine_requests()};
  std::vector<EngineStats> engines;
  for (int d = 0; d < ctx.engine->replicas(); ++d) engines.push_back(ctx.engine->replica_stats(d));
  res.set_content(render_metrics(engines, ctx.metrics.snapshot(), g), "text/plain; version=0.0.4");
}

}  // namespace

void add_info_routes(RoutedServer& svr, ServerContext& ctx) {
  using Req = const httplib::Request&;
  using Res = httplib::Response&;
  svr.Get("/health", guard([&ctx](Req, Res res) { health(ctx, res); }));
  svr.Get("/v1/health", guard([&ctx](Req, Res res) { health(ctx, res); }));
  // SageMaker's probe, as vLLM serves it: /health's answer, by GET or POST.
  svr.Get("/ping", guard([&ctx](Req, Res res) { health(ctx, res); }));
  svr.Post("/ping", guard([&ctx](Req, Res res) { health(ctx, res); }));
  svr.Get("/v1/models", guard([&ctx](Req, Res res) {
            require_model(ctx);
            send_json(res, Json{{"object", "list"}, {"data", Json::array({model_card(ctx)})}});
          }));
  svr.Get("/version", guard([](Req, Res res) { send_json(res, Json{{"version", kVersion}}); }));
  svr.Post("/tokenize", guard([&ctx](Req req, Res res) { tokenize(ctx, req, res); }));
  svr.Post("/detokenize", guard([&ctx](Req req, Res res) { detokenize(ctx, req, res); }));
  svr.Get("/metrics", guard([&ctx](Req, Res res) { metrics(ctx, res); }));
}

}  // namespace dsv4::server
