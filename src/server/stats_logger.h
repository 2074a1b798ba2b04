// The periodic stats line, vLLM's LoggingStatLogger: throughput over the last interval, running/waiting
// requests, KV usage and prefix-cache hit rate (over the interval, or since start when nothing was looked
// up), one logger (and line, "Engine 001: ...") per data-parallel replica. Idle intervals log at debug
// level, as vLLM does, to keep logs quiet.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "engine/engine_stats.h"

namespace dsv4::server {

class StatsLogger {
 public:
  using Clock = std::chrono::steady_clock;

  explicit StatsLogger(int engine = 0) : engine_(engine) {}

  // The line for the interval since the previous call (nullopt on the first call, which sets the baseline),
  // and whether the interval was idle.
  struct Line {
    std::string text;
    bool idle = false;
  };
  std::optional<Line> next(const EngineStats& s, Clock::time_point now);

  // Logs next()'s line through spdlog.
  void log(const EngineStats& s, Clock::time_point now = Clock::now());

 private:
  int engine_;
  std::optional<EngineStats> prev_;
  Clock::time_point prev_time_;
};

}  // namespace dsv4::server
