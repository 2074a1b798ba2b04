// The engine side of one HTTP generation request: every prompt x n choices submitted together, polled
// together, aborted together. It checks lengths (vLLM's "maximum context length" 400), holds an admission
// ticket for its life, resolves max_tokens (default: the endpoint's, capped by what is left of the context)
// and records the request metrics (TTFT, inter-token latency, end-to-end, finish reasons).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "server/choice.h"
#include "server/generation_options.h"
#include "server/server_context.h"

namespace dsv4::server {

class GenerationJob {
 public:
  using Clock = std::chrono::steady_clock;

  // Throws ApiError: 400 for a bad prompt or length, or for more choices than the server ever admits at once;
  // 503 when the queue is full or the server not ready. A request without max_tokens gets
  // min(default_max_tokens, what is left of the context).
  GenerationJob(ServerContext& ctx, std::vector<std::vector<int32_t>> prompts, const GenerationOptions& options,
                bool skip_special_tokens, Clock::time_point arrival, int64_t default_max_tokens);
  ~GenerationJob();  // aborts what is unfinished
  GenerationJob(const GenerationJob&) = delete;
  GenerationJob& operator=(const GenerationJob&) = delete;

  struct Update {
    size_t choice;
    ChoiceUpdate update;
  };
  // One round over the unfinished choices, waiting up to `timeout` in all for news.
  std::vector<Update> poll(std::chrono::milliseconds timeout);
  bool finished() const;
  // Ends every unfinished choice in the engine (they finish with "abort").
  void abort();

  std::vector<Choice>& choices() { return choices_; }
  const std::vector<Choice>& choices() const { return choices_; }
  size_t num_prompts() const { return prompt_lengths_.size(); }
  // OpenAI usage: prompt tokens once per prompt, completion tokens over all choices.
  Usage usage() const;
  // The first failed choice's error, if any.
  std::optional<std::string> error() const;
  bool any_aborted() const;
  int64_t created() const { return created_; }

 private:
  void check_lengths(const std::vector<std::vector<int32_t>>& prompts, const GenerationOptions& o) const;
  void check_priority(const GenerationOptions& o) const;
  void submit(const std::vector<std::vector<int32_t>>& prompts, const GenerationOptions& o, bool skip_special);
  void record(size_t i, const ChoiceUpdate& u, Clock::time_point now);
  void record_params();

  ServerContext& ctx_;
  Clock::time_point arrival_;
  int64_t created_;
  std::vector<int64_t> prompt_lengths_;
  int64_t n_ = 1;
  int64_t default_max_tokens_;
  std::unique_ptr<AdmissionTicket> ticket_;
  std::vector<Choice> choices_;
  std::vector<std::optional<Clock::time_point>> last_token_;  // per choice
};

}  // namespace dsv4::server
