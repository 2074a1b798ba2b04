#include "core/progress_bar.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace dsv4 {
namespace {

std::string clock_text(double s) {
  const auto t = static_cast<int64_t>(s);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{}:{:02}", t / 60, t % 60);
}

}  // namespace

ProgressBar::ProgressBar(std::string label, int64_t total, std::string unit, double unit_scale)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      scale_(unit_scale),
      total_(std::max<int64_t>(total, 0)),
      tty_(::isatty(STDERR_FILENO) != 0) {
  draw(true);
}

ProgressBar::~ProgressBar() { finish(); }

std::string ProgressBar::render(int64_t done, double elapsed, int width) const {
  const double frac = total_ > 0 ? std::clamp(static_cast<double>(done) / static_cast<double>(total_), 0.0, 1.0) : 1.0;
  const int filled = static_cast<int>(frac * width);
  const std::string bar =
      std::string(static_cast<size_t>(filled), '#') + std::string(static_cast<size_t>(width - filled), ' ');
  const double shown = static_cast<double>(done) / scale_, all = static_cast<double>(total_) / scale_;
  const std::string sep = unit_.empty() ? "" : " ";
  const std::string rate =
      elapsed > 0 ? fmt::format("  {:.1f}{}{}/s", shown / elapsed, sep, unit_.empty() ? "it" : unit_) : "";
  const std::string amount = scale_ == 1 ? fmt::format("{}/{}{}{}", done, total_, sep, unit_)
                                         : fmt::format("{:.1f}/{:.1f}{}{}", shown, all, sep, unit_);
  return fmt::format("{} {:3.0f}% |{}| {}{}  {}", label_, frac * 100, bar, amount, rate, clock_text(elapsed));
}

void ProgressBar::update(int64_t done) {
  done_ = done;
  draw(false);
}

void ProgressBar::draw(bool force) {
  if (finished_) return;
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (tty_) {
    if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    fmt::print(stderr, "\r{}\x1b[K", render(done_, elapsed));
    std::fflush(stderr);
    return;
  }
  const int quarter = total_ > 0 ? static_cast<int>(4 * std::min(done_, total_) / total_) : 4;
  if (quarter == last_quarter_ && !force) return;
  last_quarter_ = quarter;
  fmt::print(stderr, "{}\n", render(done_, elapsed));
}

void ProgressBar::finish() {
  if (finished_) return;
  if (tty_) {
    draw(true);
    fmt::print(stderr, "\n");
  } else if (last_quarter_ != 4) {
    draw(true);  // the final line, unless the last quarter already drew it
  }
  finished_ = true;
}

}  // namespace dsv4
