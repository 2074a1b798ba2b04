// One SSE response in progress. cpp-httplib calls pump() over and over on the connection's thread until it
// calls sink.done() or returns false; each call waits briefly for tokens, writes their chunks, and writes
// a ": ping" comment when nothing was sent for --sse-ping-interval (a long prefill), so that proxies keep
// the connection and a client that left is noticed (the write fails). The connection probe notices a
// client that left sooner. Either way the engine requests are aborted and their KV blocks freed.
#pragma once

#include <httplib.h>

#include <chrono>
#include <memory>

#include "server/connection_probe.h"
#include "server/generation_job.h"
#include "server/response_format.h"

namespace dsv4::server {

class StreamSession {
 public:
  using Clock = std::chrono::steady_clock;

  StreamSession(ServerContext& ctx, std::unique_ptr<GenerationJob> job, std::unique_ptr<ResponseFormat> format,
                const GenerationOptions& options, ConnectionProbe probe);

  // One provider call: false ends the stream as failed (the client is gone).
  bool pump(httplib::DataSink& sink);
  // The resource releaser: aborts what is unfinished (after a disconnect) and frees the job.
  void release(bool success);

 private:
  bool write(httplib::DataSink& sink, std::string_view data);
  bool write_chunks(httplib::DataSink& sink, std::vector<Json>& chunks);
  bool finish(httplib::DataSink& sink);
  bool client_gone();

  ServerContext& ctx_;
  std::unique_ptr<GenerationJob> job_;
  std::unique_ptr<ResponseFormat> format_;
  bool include_usage_, continuous_usage_;
  ConnectionProbe probe_;
  bool started_ = false;
  Clock::time_point last_write_ = Clock::now();
  Clock::time_point last_probe_ = Clock::now();
};

// Makes `res` an SSE response driven by a StreamSession.
void start_event_stream(httplib::Response& res, std::shared_ptr<StreamSession> session);

}  // namespace dsv4::server
