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
#include "server/responses_format.h"
#include "server/responses_request.h"
#include "server/sse.h"
#include "server/stream_session.h"
#include "server/structured_output.h"

namespace dsv4::server {
namespace {

using Clock = std::chrono::steady_clock;

// vLLM's (and OpenAI's legacy API's) default for /v1/completions; chat has none, so it runs to
// --default-max-tokens or the end of the context.
constexpr int64_t kCompletionsDefaultMaxTokens = 16;

void check_model(const ServerContext& ctx, const std::string& model) {
  if (!model.empty() && model != ctx.model.name) throw model_not_found(model);
}

// The moment the client leaves, the job's engine requests are aborted from the reader's thread, so a long
// prefill stops at the engine's next step instead of when this thread next looks.
void abort_when_client_leaves(const ServerContext& ctx, const GenerationJob& job, const ConnectionProbe& probe) {
  std::vector<RequestId> ids;
  for (const Choice& c : job.choices()) ids.push_back(c.id());
  probe.on_close([engine = ctx.engine, ids = std::move(ids)] {
    for (const RequestId id : ids) engine->abort(id);
  });
}

// Waits for every choice; false when the client left (the job is aborted: nobody reads the answer).
bool run_to_completion(ServerContext& ctx, GenerationJob& job, ResponseFormat& format, const ConnectionProbe& probe) {
  while (!job.finished() && !probe.closed()) {
    for (auto& [i, u] : job.poll(std::chrono::milliseconds(50))) format.collect(job.choices()[i], u);
  }
  if (probe.closed()) {  // before the aborted checks below: the abort was the client's, not the server's
    spdlog::info("http: {}: the client closed the connection; aborted", format.id());
    job.abort();
    return false;
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

void respond(ServerContext& ctx, httplib::Response& res, const GenerationOptions& o, std::unique_ptr<GenerationJob> job,
             std::unique_ptr<ResponseFormat> format) {
  if (!o.request_id.empty()) format->use_request_id(o.request_id);
  const ConnectionProbe probe = ConnectionProbe::current();
  abort_when_client_leaves(ctx, *job, probe);
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
  r.options.constraint =
      make_constraint(ctx.grammars, *ctx.tokenizer, ctx.model.eos_token_id, {.structured = &r.structured});
  std::vector<std::vector<int32_t>> prompts;
  for (PromptInput& p : r.prompts) prompts.push_back(p.text ? ctx.tokenizer->encode(*p.text) : std::move(p.ids));
  prepare(ctx, r.options, prompts);
  auto job =
      std::make_unique<GenerationJob>(ctx, std::move(prompts), r.options, r.options.skip_special_tokens.value_or(true),
                                      arrival, std::min(kCompletionsDefaultMaxTokens, ctx.config.default_max_tokens));
  auto format = std::make_unique<CompletionFormat>(ctx.model.name, job->created(), *ctx.tokenizer, r.options.logprobs,
                                                   job->choices().size());
  format->name_tokens_by_id(r.options.tokens_as_ids);
  respond(ctx, res, r.options, std::move(job), std::move(format));
}

// A chat request as an engine job (its constraint made, its messages encoded): what /v1/chat/completions
// and /v1/responses share; `parse_mode` receives how the generated text starts.
std::unique_ptr<GenerationJob> chat_job(ServerContext& ctx, ChatRequest& r, Clock::time_point arrival,
                                        chat::ThinkingMode& parse_mode) {
  check_model(ctx, r.options.model);
  r.options.constraint = make_constraint(
      ctx.grammars, *ctx.tokenizer, ctx.model.eos_token_id,
      {&r.structured, &r.tool_choice, &r.tools, r.encode.thinking_mode == chat::ThinkingMode::kThinking});
  chat::ChatPrompt prompt;
  try {
    prompt = chat::encode_chat_prompt(std::move(r.messages), r.encode, r.continue_final);
  } catch (const Error& e) {
    bad_request("messages", "{}", e.what());
  }
  parse_mode = prompt.parse_mode;
  // Special tokens stay in the text: the completion parser needs </think> and DSML, and drops the rest.
  std::vector<std::vector<int32_t>> prompts;
  prompts.push_back(ctx.tokenizer->encode(prompt.text));
  prepare(ctx, r.options, prompts);
  return std::make_unique<GenerationJob>(ctx, std::move(prompts), r.options, false, arrival,
                                         ctx.config.default_max_tokens);
}

void chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const auto arrival = Clock::now();
  check_serving(ctx);
  ChatRequest r = parse_chat_request(parse_request_body(req.body));
  chat::ThinkingMode parse_mode{};
  auto job = chat_job(ctx, r, arrival, parse_mode);
  ChatFormatOptions fo{parse_mode,
                       r.logprobs,
                       r.top_logprobs,
                       r.options.tokens_as_ids,
                       r.include_reasoning,
                       r.parallel_tool_calls,
                       !r.options.skip_special_tokens.value_or(true)};
  auto format = std::make_unique<ChatFormat>(ctx.model.name, job->created(), *ctx.tokenizer, fo, job->choices().size());
  respond(ctx, res, r.options, std::move(job), std::move(format));
}

void responses(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const auto arrival = Clock::now();
  check_serving(ctx);
  ResponsesRequest r = parse_responses_request(parse_request_body(req.body));
  chat::ThinkingMode parse_mode{};
  auto job = chat_job(ctx, r.chat, arrival, parse_mode);
  const ResponsesFormatOptions fo{
      parse_mode,      r.chat.parallel_tool_calls, !r.chat.options.skip_special_tokens.value_or(true),
      r.chat.logprobs, r.chat.top_logprobs,        r.chat.options.tokens_as_ids};
  auto format =
      std::make_unique<ResponsesFormat>(ctx.model.name, job->created(), *ctx.tokenizer, fo, std::move(r.echo));
  respond(ctx, res, r.chat.options, std::move(job), std::move(format));
}

}  // namespace

void add_generation_routes(RoutedServer& svr, ServerContext& ctx) {
  const auto rejected = [&ctx](const ApiError& e) {
    if (e.status() < 500 || e.status() == 503) ctx.metrics.count_rejected();
  };
  svr.Post(
      "/v1/completions",
      guard([&ctx](const httplib::Request& req, httplib::Response& res) { completions(ctx, req, res); }, rejected));
  svr.Post("/v1/chat/completions",
           guard([&ctx](const httplib::Request& req, httplib::Response& res) { chat_completions(ctx, req, res); },
                 rejected));
  svr.Post("/v1/responses",
           guard([&ctx](const httplib::Request& req, httplib::Response& res) { responses(ctx, req, res); }, rejected));
}

}  // namespace dsv4::server
