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
#include "server/messages_format.h"
#include "server/messages_request.h"
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
  std::vector<size_t> lengths;
  for (const auto& p : prompts) lengths.push_back(p.size());
  prepare(ctx, r.options, prompts);
  std::vector<EchoPrompt> named;
  for (size_t i = 0; i < prompts.size() && (r.echo || r.options.return_token_ids); ++i) {
    // echo: the prompt's own text where it came as text and was kept whole, else its tokens' text
    const PromptInput& in = r.prompts[i];
    const bool whole = in.text && prompts[i].size() == lengths[i];
    named.push_back({!r.echo ? std::string() : whole ? *in.text : ctx.tokenizer->decode(prompts[i]), prompts[i]});
  }
  auto job =
      std::make_unique<GenerationJob>(ctx, std::move(prompts), r.options, r.options.skip_special_tokens.value_or(true),
                                      arrival, std::min(kCompletionsDefaultMaxTokens, ctx.config.default_max_tokens));
  auto format = std::make_unique<CompletionFormat>(ctx.model.name, job->created(), *ctx.tokenizer, r.options.logprobs,
                                                   job->choices().size());
  format->name_tokens_by_id(r.options.tokens_as_ids);
  format->set_prompts(std::move(named), r.options.n);
  if (r.echo) format->echo();
  if (r.options.return_token_ids) format->return_token_ids();
  if (r.show_prompt_logprobs >= 0) format->show_prompt_logprobs(r.show_prompt_logprobs);
  respond(ctx, res, r.options, std::move(job), std::move(format));
}

// A chat request's messages encoded into its prompt (a bad conversation is a 400 naming them).
chat::ChatPrompt encoded_prompt(ChatRequest& r) {
  try {
    return chat::encode_chat_prompt(std::move(r.messages), r.encode, r.continue_final);
  } catch (const Error& e) {
    bad_request("messages", "{}", e.what());
  }
}

// A chat request run and answered: what /v1/chat/completions, /v1/responses and /v1/messages share.
// `make_format(parse_mode, job, prompt_ids)` makes the answer's format, parse_mode saying how the generated
// text starts.
template <class MakeFormat>
void answer_chat(ServerContext& ctx, httplib::Response& res, ChatRequest& r, Clock::time_point arrival,
                 MakeFormat&& make_format) {
  check_model(ctx, r.options.model);
  r.options.constraint = make_constraint(ctx.grammars, *ctx.tokenizer, ctx.model.eos_token_id,
                                         {&r.structured, &r.tool_choice, &r.tools,
                                          r.encode.thinking_mode == chat::ThinkingMode::kThinking, r.thinking_budget});
  const chat::ChatPrompt prompt = encoded_prompt(r);
  // Special tokens stay in the text: the completion parser needs </think> and DSML, and drops the rest.
  std::vector<std::vector<int32_t>> prompts;
  prompts.push_back(ctx.tokenizer->encode(prompt.text));
  prepare(ctx, r.options, prompts);
  const std::vector<int32_t> prompt_ids = prompts.front();
  auto job = std::make_unique<GenerationJob>(ctx, std::move(prompts), r.options, false, arrival,
                                             ctx.config.default_max_tokens);
  std::unique_ptr<ResponseFormat> format = make_format(prompt.parse_mode, *job, prompt_ids);
  respond(ctx, res, r.options, std::move(job), std::move(format));
}

bool keep_special_tokens(const ChatRequest& r) { return !r.options.skip_special_tokens.value_or(true); }

void chat_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const auto arrival = Clock::now();
  check_serving(ctx);
  ChatRequest r = parse_chat_request(parse_request_body(req.body));
  answer_chat(ctx, res, r, arrival, [&](chat::ThinkingMode mode, const GenerationJob& job, const auto& prompt_ids) {
    const ChatFormatOptions fo{mode,
                               r.logprobs,
                               r.top_logprobs,
                               r.options.tokens_as_ids,
                               r.include_reasoning,
                               r.parallel_tool_calls,
                               keep_special_tokens(r),
                               r.options.prompt_logprobs,
                               r.options.return_token_ids};
    auto format = std::make_unique<ChatFormat>(ctx.model.name, job.created(), *ctx.tokenizer, fo, job.choices().size());
    format->set_prompt_ids(prompt_ids);
    return format;
  });
}

void responses(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const auto arrival = Clock::now();
  check_serving(ctx);
  ResponsesRequest r = parse_responses_request(parse_request_body(req.body));
  answer_chat(ctx, res, r.chat, arrival, [&](chat::ThinkingMode mode, const GenerationJob& job, const auto&) {
    const ResponsesFormatOptions fo{{mode, r.chat.parallel_tool_calls, keep_special_tokens(r.chat)},
                                    r.chat.logprobs,
                                    r.chat.top_logprobs,
                                    r.chat.options.tokens_as_ids};
    return std::make_unique<ResponsesFormat>(ctx.model.name, job.created(), *ctx.tokenizer, fo, std::move(r.echo));
  });
}

void messages(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const auto arrival = Clock::now();
  check_serving(ctx);
  ChatRequest r = parse_messages_request(parse_request_body(req.body));
  answer_chat(ctx, res, r, arrival, [&](chat::ThinkingMode mode, const GenerationJob& job, const auto&) {
    const AnswerOptions fo{mode, r.parallel_tool_calls, keep_special_tokens(r)};
    return std::make_unique<MessagesFormat>(ctx.model.name, job.created(), fo);
  });
}

// Anthropic's token count: the prompt a Messages request would run (max_tokens not needed).
void count_message_tokens(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  Json body = parse_request_body(req.body);
  if (!body.contains("max_tokens")) body["max_tokens"] = 1;
  ChatRequest r = parse_messages_request(body);
  check_model(ctx, r.options.model);
  const chat::ChatPrompt prompt = encoded_prompt(r);  // no constraint: nothing is generated
  res.set_content(dump_json(Json{{"input_tokens", ctx.tokenizer->encode(prompt.text).size()}}), "application/json");
}

// SageMaker's inference route (with /ping, its whole contract; vLLM serves both): the body says which
// API it is meant for, `messages` chat completions and `prompt` completions.
void invocations(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const Json body = parse_request_body(req.body);  // an object, or a 400
  if (body.contains("messages")) return chat_completions(ctx, req, res);
  if (body.contains("prompt")) return completions(ctx, req, res);
  bad_request("",
              "/invocations takes a chat completions request (with \"messages\") or a completions request "
              "(with \"prompt\")");
}

// Anthropic's clients read an error as {"type": "error", "error": {...}}.
httplib::Server::Handler with_messages_errors(httplib::Server::Handler handler) {
  return [handler = std::move(handler)](const httplib::Request& req, httplib::Response& res) {
    handler(req, res);
    if (res.status < 400) return;
    const Json body = Json::parse(res.body, nullptr, false);
    if (body.is_object()) res.set_content(dump_json(messages_error(body)), "application/json");
  };
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
  svr.Post("/v1/messages",
           with_messages_errors(guard(
               [&ctx](const httplib::Request& req, httplib::Response& res) { messages(ctx, req, res); }, rejected)));
  svr.Post("/v1/messages/count_tokens",
           with_messages_errors(guard(
               [&ctx](const httplib::Request& req, httplib::Response& res) { count_message_tokens(ctx, req, res); })));
  svr.Post("/v1/responses",
           guard([&ctx](const httplib::Request& req, httplib::Response& res) { responses(ctx, req, res); }, rejected));
  svr.Post(
      "/invocations",
      guard([&ctx](const httplib::Request& req, httplib::Response& res) { invocations(ctx, req, res); }, rejected));
}

}  // namespace dsv4::server
