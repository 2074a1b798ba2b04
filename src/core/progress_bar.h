// A progress bar on stderr, tqdm-like: "Loading weights  63% |#####     | 88.0/140.0 MiB  512.0 MiB/s  0:01".
// On a terminal it redraws one line (at most 10 times a second); otherwise (a log file, CI) it writes a
// plain line at every quarter so logs stay short.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace dsv4 {

class ProgressBar {
 public:
  // `unit_scale`: units of `total` shown per displayed unit (1 << 20 with unit "MiB" for bytes).
  ProgressBar(std::string label, int64_t total, std::string unit = "", double unit_scale = 1);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(int64_t done);  // absolute progress
  void advance(int64_t n) { update(done_ + n); }
  void finish();  // draws 100% (or where it stopped) and ends the line

  // The line as drawn, for tests.
  std::string render(int64_t done, double elapsed_seconds, int width = 24) const;

 private:
  void draw(bool force);

  std::string label_, unit_;
  double scale_;
  int64_t total_, done_ = 0;
  bool tty_;
  bool finished_ = false;
  int last_quarter_ = -1;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_draw_{};
};

}  // namespace dsv4
