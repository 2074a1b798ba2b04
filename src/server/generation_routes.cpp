#include "server/generation_routes.h"

#include <spdlog/spdlog.h>

#include "chat/assistant_prefill.h"
#include "chat/encoding.h"
#include "core/error.h"
#include "server/bad_words.h"
#include "server/chat_format.h"
#include "server/chat_request.h"
#include "server/completion_format.h"
#include "server/completion_request.h"
#include "server/connection_probe.h"
#include "server/handler_guard.h"
#include "server/prompt_truncation.h"
#include "server/sse.h"
#include "server/stream_session.h"

namespace dsv4::server {
namespace {

using Clock = std::chrono::steady_clock;

void check_serving(const ServerContext& ctx) {
  switch (ctx.state()) {
    case ServerState::kReady:
      return;
    case ServerState::kLoading:
      throw unavailable("The model is loading");
    case ServerState::kDraining:
      throw unavailable("The server is shutting down");
    case ServerState::kFailed:
      throw unavailable("The engine failed: " + ctx.failure());
  }
}

void check_model(const ServerContext& ctx, const std::string& model) {
  if (!model.empty() && model != ctx.model.name) throw model_not_found(model);
}

// Waits for every choice; a client that left aborts the job (nobody reads the answer).
bool run_to_completion(ServerContext& ctx, GenerationJob& job, ResponseFormat& format, const ConnectionProbe& probe) {
  auto last_probe = Clock::now();
  while (!job.finished()) {
    for (auto& [i, u] : job.poll(std::chrono::milliseconds(50))) format.collect(job.choices()[i], u);
    if (Clock::now() - last_probe >= std::chrono::milliseconds(100)) {
      last_probe = Clock::now();
      if (probe.closed()) {
        spdlog::info("http: {}: the client closed the connection; aborting", format.id());
        job.abort();
        return false;
      }
    }
  }
  if (const auto err = job.error()) throw internal_error(*err);
  if (job.any_aborted()) {
    if (ctx.state() == ServerState::kFailed) throw internal_error("The engine failed: " + ctx.failure());
    throw unavailable("The request was aborted: the server is shutting down");
  }
  return true;
}

// What the options and prompts need from the tokenizer and the model before they become a job: the bad
// words as token ids, the prompts truncated as asked.
void prepare(const ServerContext& ctx, GenerationOptions& o, std::vector<std::vector<int32_t>>& prompts) {
  o.bad_words_ids = tokenize_bad_words(o.bad_words, *ctx.tokenizer);
  truncate_prompts(prompts, o, ctx.model.max_model_len);
}

void respond(ServerContext& ctx, const httplib::Request& req, httplib::Response& res, const GenerationOptions& o,
             std::unique_ptr<GenerationJob> job, std::unique_ptr<ResponseFormat> format) {
  if (!o.request_id.empty()) format->use_request_id(o.request_id);
  ConnectionProbe probe(req.remote_addr, req.remote_port);
  if (o.stream) {
    start_event_stream(res, std::make_shared<StreamSession>(ctx, std::move(job), std::move(format), o, probe));
    return;
  }
  if (!run_to_completion(ctx, *job, *format, probe)) {
    res.status = 499;  // nginx's "client closed request"; nobody reads it
    return;
  }
  res.set_content(dump_json(format->response(*job)), "application/json");
}

void completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const auto arrival = Clock::now();
  check_serving(ctx);
  CompletionRequest r = parse_completion_request(parse_request_body(req.body));
  check_model(ctx, r.options.model);
  std::vector<std::vector<int32_t>> prompts;
  for (PromptInput& p : r.prompts) prompts.push_back(p.text ? ctx.tokenizer->encode(*p.text) : std::move(p.ids));
  prepare(ctx, r.options, prompts);
  auto job = std::make_unique<GenerationJob>(ctx, std::move(prompts), r.options,
                                             r.options.skip_special_tokens.value_or(true), arrival);
  auto format = std::make_unique<CompletionFormat>(ctx.model.name, job->created(), *ctx.tokenizer, r.options.logprobs,
                                                   job->choices().size());
  format->name_tokens_by_id(r.options.tokens_as_ids);
  respond(ctx, req, res, r.options, std::move(job), std::move(format));
}

void chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const auto arrival = Clock::now();
  check_serving(ctx);
  ChatRequest r = parse_chat_request(parse_request_body(req.body));
  check_model(ctx, r.options.model);
  chat::ChatPrompt prompt;
  try {
    prompt = chat::encode_chat_prompt(std::move(r.messages), r.encode, r.continue_final);
  } catch (const Error& e) {
    bad_request("messages", "{}", e.what());
  }
  // Special tokens stay in the text: the completion parser needs </think> and DSML, and drops the rest.
  std::vector<std::vector<int32_t>> prompts;
  prompts.push_back(ctx.tokenizer->encode(prompt.text));
  prepare(ctx, r.options, prompts);
  auto job = std::make_unique<GenerationJob>(ctx, std::move(prompts), r.options, false, arrival);
  ChatFormatOptions fo{prompt.parse_mode,
                       r.logprobs,
                       r.top_logprobs,
                       r.options.tokens_as_ids,
                       r.include_reasoning,
                       r.parallel_tool_calls,
                       !r.options.skip_special_tokens.value_or(true)};
  auto format = std::make_unique<ChatFormat>(ctx.model.name, job->created(), *ctx.tokenizer, fo, job->choices().size());
  respond(ctx, req, res, r.options, std::move(job), std::move(format));
}

}  // namespace

void add_generation_routes(httplib::Server& svr, ServerContext& ctx) {
  const auto rejected = [&ctx](const ApiError& e) {
    if (e.status() < 500 || e.status() == 503) ctx.metrics.count_rejected();
  };
  svr.Post(
      "/v1/completions",
      guard([&ctx](const httplib::Request& req, httplib::Response& res) { completions(ctx, req, res); }, rejected));
  svr.Post("/v1/chat/completions",
           guard([&ctx](const httplib::Request& req, httplib::Response& res) { chat_completions(ctx, req, res); },
                 rejected));
}

}  // namespace dsv4::server
