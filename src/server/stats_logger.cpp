#include "server/stats_logger.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace dsv4::server {

std::optional<StatsLogger::Line> StatsLogger::next(const EngineStats& s, Clock::time_point now) {
  if (!prev_) {
    prev_ = s;
    prev_time_ = now;
    return std::nullopt;
  }
  const double dt = std::max(1e-9, std::chrono::duration<double>(now - prev_time_).count());
  const int64_t generated = s.generation_tokens - prev_->generation_tokens;
  // Positions computed that were not decode steps: prompt tokens (recomputation after preemption included).
  const int64_t prompt = std::max<int64_t>(0, (s.computed_tokens - prev_->computed_tokens) - generated);
  const int64_t queries = s.prefix_query_tokens - prev_->prefix_query_tokens;
  const double hit_rate =
      queries > 0 ? static_cast<double>(s.prefix_hit_tokens - prev_->prefix_hit_tokens) / queries : s.prefix_hit_rate();
  Line line;
  line.idle = generated == 0 && prompt == 0 && s.running == 0 && s.waiting == 0;
  line.text = fmt::format(
      "Engine {:03d}: Avg prompt throughput: {:.1f} tokens/s, Avg generation throughput: {:.1f} tokens/s, Running: "
      "{} reqs, Waiting: {} reqs, KV cache usage: {:.1f}%, Prefix cache hit rate: {:.1f}%",
      engine_, static_cast<double>(prompt) / dt, static_cast<double>(generated) / dt, s.running, s.waiting,
      100 * s.kv_usage(), 100 * hit_rate);
  if (s.device_memory_used >= 0) {
    constexpr double kGiB = 1 << 30;
    line.text +=
        fmt::format(", GPU memory: {:.1f} GiB in use (peak {:.1f} GiB)",
                    static_cast<double>(s.device_memory_used) / kGiB, static_cast<double>(s.device_memory_peak) / kGiB);
  }
  if (s.preemptions > prev_->preemptions) {
    line.text += fmt::format(", Preemptions: {} (total {})", s.preemptions - prev_->preemptions, s.preemptions);
  }
  prev_ = s;
  prev_time_ = now;
  return line;
}

void StatsLogger::log(const EngineStats& s, Clock::time_point now) {
  const auto line = next(s, now);
  if (!line) return;
  if (line->idle) {
    spdlog::debug("{}", line->text);
  } else {
    spdlog::info("{}", line->text);
  }
}

}  // namespace dsv4::server
