#include "server/generation_job.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "core/error.h"
#include "server/api_error.h"

namespace dsv4::server {
namespace {

double seconds(GenerationJob::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The request field an engine refusal is about: SamplingParams::validate and Engine::add_request start
// their messages with the field's name ("allowed_token_ids: token id 9 is outside ...").
std::string engine_error_param(std::string_view message) {
  static constexpr std::string_view kFields[] = {
      "temperature",       "top_k",      "top_p",      "min_p",    "repetition_penalty", "presence_penalty",
      "frequency_penalty", "max_tokens", "min_tokens", "logprobs", "logit_bias",         "stop_token_ids",
      "allowed_token_ids", "bad_words",  "priority",   "prompt"};
  const std::string_view first = message.substr(0, message.find_first_of(": "));
  for (std::string_view f : kFields)
    if (first == f) return std::string(f);
  return {};
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

GenerationJob::GenerationJob(ServerContext& ctx, std::vector<std::vector<int32_t>> prompts,
                             const GenerationOptions& options, bool skip_special_tokens, Clock::time_point arrival,
                             int64_t default_max_tokens)
    : ctx_(ctx), arrival_(arrival), created_(unix_now()), n_(options.n), default_max_tokens_(default_max_tokens) {
  if (!ctx_.accepting() || ctx_.engine == nullptr) {
    throw unavailable(ctx_.state() == ServerState::kLoading ? "The model is loading" : "The server is shutting down");
  }
  check_lengths(prompts, options);
  check_priority(options);
  const auto total = static_cast<int64_t>(prompts.size()) * n_;
  if (total > ctx_.admission.capacity()) {  // retrying cannot help: a 400, not a 503
    bad_request("n",
                "The request needs {} engine requests ({} prompt(s) x n = {}), more than this server ever runs "
                "and queues at once ({}: --max-num-seqs + --max-waiting-requests)",
                total, prompts.size(), n_, ctx_.admission.capacity());
  }
  if (!ctx_.admission.try_acquire(total)) {
    throw unavailable(fmt::format("The server is busy: {} requests are running or waiting, the limit is {} "
                                  "(--max-num-seqs + --max-waiting-requests); retry later",
                                  ctx_.admission.engine_requests(), ctx_.admission.capacity()),
                      "queue_full");
  }
  ticket_ = std::make_unique<AdmissionTicket>(ctx_.admission, total);
  submit(prompts, options, skip_special_tokens);
}

GenerationJob::~GenerationJob() { abort(); }

void GenerationJob::check_lengths(const std::vector<std::vector<int32_t>>& prompts, const GenerationOptions& o) const {
  const int64_t max_len = ctx_.model.max_model_len;
  for (const auto& p : prompts) {
    const auto len = static_cast<int64_t>(p.size());
    if (len == 0) bad_request("prompt", "The prompt is empty (0 tokens)");
    if (len + o.max_tokens.value_or(1) > max_len) throw context_length_exceeded(max_len, len, o.max_tokens.value_or(0));
  }
}

// vLLM's rule: a priority other than 0 is an error unless the server schedules by priority.
void GenerationJob::check_priority(const GenerationOptions& o) const {
  if (o.priority != 0 && ctx_.engine->config().scheduling_policy != SchedulingPolicy::kPriority) {
    bad_request("priority", "'priority' {} needs the priority scheduling policy (serve --scheduling-policy priority)",
                o.priority);
  }
}

void GenerationJob::submit(const std::vector<std::vector<int32_t>>& prompts, const GenerationOptions& o,
                           bool skip_special) {
  const int64_t max_len = ctx_.model.max_model_len;
  choices_.reserve(prompts.size() * static_cast<size_t>(n_));
  for (const auto& p : prompts) {
    const auto len = static_cast<int64_t>(p.size());
    prompt_lengths_.push_back(len);
    const int64_t max_tokens = o.max_tokens.value_or(std::min(default_max_tokens_, max_len - len));
    for (int64_t j = 0; j < n_; ++j) {
      GenerateRequest r{p, o.sampling(ctx_.defaults, max_tokens, j), o.cache_salt, o.priority};
      if (r.sampling.min_tokens > r.sampling.max_tokens) r.sampling.min_tokens = r.sampling.max_tokens;
      std::shared_ptr<RequestStream> stream;
      try {
        stream = ctx_.engine->add_request(std::move(r));
      } catch (const Error& e) {
        abort();  // the choices already submitted (a throwing constructor runs no destructor)
        if (!ctx_.accepting()) throw unavailable("The server is shutting down");
        bad_request(engine_error_param(e.what()), "{}", e.what());
      }
      choices_.emplace_back(static_cast<int64_t>(choices_.size()), std::move(stream),
                            OutputText(*ctx_.tokenizer, skip_special, o.stop, o.include_stop_str_in_output),
                            o.include_stop_str_in_output, ctx_.model.eos_token_id);
      last_token_.emplace_back();
    }
  }
}

std::vector<GenerationJob::Update> GenerationJob::poll(std::chrono::milliseconds timeout) {
  std::vector<Update> out;
  const auto unfinished =
      std::count_if(choices_.begin(), choices_.end(), [](const Choice& c) { return !c.finished(); });
  if (unfinished == 0) return out;
  // Split the wait over the choices until one has news; then only collect what is already there.
  const auto share = std::max<std::chrono::milliseconds>(std::chrono::milliseconds(1), timeout / unfinished);
  Engine& engine = *ctx_.engine;
  const Choice::AbortFn abort_fn = [&engine](RequestId id) { engine.abort(id); };
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (choices_[i].finished()) continue;
    ChoiceUpdate u = choices_[i].poll(out.empty() ? share : std::chrono::milliseconds(0), abort_fn);
    if (u.token_ids.empty() && !u.finished) continue;
    record(i, u, Clock::now());
    out.push_back({i, std::move(u)});
  }
  return out;
}

void GenerationJob::record(size_t i, const ChoiceUpdate& u, Clock::time_point now) {
  const auto k = static_cast<uint64_t>(u.token_ids.size());
  if (k > 0) {
    if (!last_token_[i]) {
      ctx_.metrics.observe_ttft(seconds(now - arrival_));
      if (k > 1) ctx_.metrics.observe_itl(0, k - 1);  // arrived together
    } else {
      ctx_.metrics.observe_itl(seconds(now - *last_token_[i]), k);
    }
    last_token_[i] = now;
  }
  if (u.finished) {
    ctx_.metrics.observe_e2e(seconds(now - arrival_));
    ctx_.metrics.count_finished(choices_[i].finish_reason());
    if (finished()) record_params();
  }
}

// vLLM's request_params_n and request_max_num_generation_tokens: once per prompt, over its n choices.
void GenerationJob::record_params() {
  const auto n = static_cast<size_t>(n_);
  for (size_t first = 0; first < choices_.size(); first += n) {
    int64_t longest = 0;
    for (size_t j = first; j < first + n && j < choices_.size(); ++j) {
      longest = std::max(longest, choices_[j].usage().completion_tokens);
    }
    ctx_.metrics.observe_request(n_, longest, ctx_.model.max_model_len);
  }
}

bool GenerationJob::finished() const {
  return std::all_of(choices_.begin(), choices_.end(), [](const Choice& c) { return c.finished(); });
}

void GenerationJob::abort() {
  if (ctx_.engine == nullptr) return;
  for (const Choice& c : choices_) {
    if (!c.finished()) ctx_.engine->abort(c.id());
  }
}

Usage GenerationJob::usage() const {
  Usage u;
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Usage& c = choices_[i].usage();
    if (i % static_cast<size_t>(n_) == 0) {
      u.prompt_tokens += prompt_lengths_[i / static_cast<size_t>(n_)];
      u.cached_tokens += c.cached_tokens;
    }
    u.completion_tokens += c.completion_tokens;
  }
  return u;
}

std::optional<std::string> GenerationJob::error() const {
  for (const Choice& c : choices_) {
    if (c.failed()) return c.error().empty() ? std::string("the engine failed") : c.error();
  }
  return std::nullopt;
}

bool GenerationJob::any_aborted() const {
  return std::any_of(choices_.begin(), choices_.end(), [](const Choice& c) { return c.finished() && c.aborted(); });
}

}  // namespace dsv4::server
