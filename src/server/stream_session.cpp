#include "server/stream_session.h"

#include <spdlog/spdlog.h>

#include <optional>

#include "server/api_error.h"
#include "server/sse.h"

namespace dsv4::server {
namespace {

constexpr auto kPollWait = std::chrono::milliseconds(50);
constexpr auto kProbeEvery = std::chrono::milliseconds(200);

}  // namespace

StreamSession::StreamSession(ServerContext& ctx, std::unique_ptr<GenerationJob> job,
                             std::unique_ptr<ResponseFormat> format, const GenerationOptions& options,
                             ConnectionProbe probe)
    : ctx_(ctx),
      job_(std::move(job)),
      format_(std::move(format)),
      include_usage_(options.include_usage || options.continuous_usage_stats),
      continuous_usage_(options.continuous_usage_stats),
      probe_(probe) {}

bool StreamSession::write(httplib::DataSink& sink, std::string_view data) {
  // Never write an empty buffer: cpp-httplib takes a zero-length write as the end of the content.
  if (data.empty()) return true;
  if (!sink.write(data.data(), data.size())) return false;
  last_write_ = Clock::now();
  return true;
}

bool StreamSession::write_chunks(httplib::DataSink& sink, std::vector<Json>& chunks) {
  for (Json& c : chunks) {
    if (continuous_usage_) c["usage"] = usage_json(job_->usage());
    if (!write(sink, format_->sse(c))) return false;
  }
  chunks.clear();
  return true;
}

bool StreamSession::client_gone() {
  const auto now = Clock::now();
  if (now - last_probe_ < kProbeEvery) return false;
  last_probe_ = now;
  return probe_.closed();
}

bool StreamSession::pump(httplib::DataSink& sink) {
  std::vector<Json> chunks;
  if (!started_) {
    started_ = true;
    format_->start(*job_, chunks);
    return write_chunks(sink, chunks);
  }
  for (auto& [i, u] : job_->poll(kPollWait)) format_->stream(job_->choices()[i], u, chunks);
  if (!write_chunks(sink, chunks)) return false;
  if (job_->finished()) return finish(sink);
  if (client_gone()) {
    spdlog::info("http: {}: the client closed the connection; aborting", format_->id());
    return false;
  }
  const auto ping = std::chrono::duration<double>(ctx_.config.sse_ping_interval);
  if (ctx_.config.sse_ping_interval > 0 && Clock::now() - last_write_ >= ping) return write(sink, kSsePing);
  return true;
}

bool StreamSession::finish(httplib::DataSink& sink) {
  // After the status line has gone, errors travel as an event (vLLM's convention).
  std::optional<ApiError> failure;
  if (const auto err = job_->error()) {
    failure = internal_error(*err);
  } else if (job_->any_aborted() && ctx_.state() == ServerState::kFailed) {
    failure = internal_error("The engine failed: " + ctx_.failure());
  }
  if (failure) {
    if (!write(sink, format_->sse(format_->error_chunk(*failure)))) return false;
  } else {  // the format's closing chunks (a response's "response.completed")
    std::vector<Json> last;
    format_->finish(*job_, last);
    if (!write_chunks(sink, last)) return false;
  }
  if (include_usage_ && !write(sink, sse_event(format_->usage_chunk(*job_)))) return false;
  if (format_->done_marker() && !write(sink, kSseDone)) return false;
  sink.done();
  return true;
}

void StreamSession::release(bool success) {
  if (!success && job_ && !job_->finished()) {
    spdlog::info("http: {}: stream ended early; aborting its requests", format_->id());
  }
  if (job_) job_->abort();
  job_.reset();  // releases the admission ticket now, not when httplib drops the provider
}

void start_event_stream(httplib::Response& res, std::shared_ptr<StreamSession> session) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // nginx: do not buffer the stream
  res.set_chunked_content_provider(
      "text/event-stream", [session](size_t, httplib::DataSink& sink) { return session->pump(sink); },
      [session](bool success) { session->release(success); });
}

}  // namespace dsv4::server
