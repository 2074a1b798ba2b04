// The Prometheus text exposition format (version 0.0.4): metric families with # HELP and # TYPE, then
// their samples, label values escaped. A family started again (another engine's samples) gets its
// samples added to it, so each family is written whole, in the order of its first start.
#pragma once

#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/histogram.h"

namespace dsv4::server {

using Labels = std::vector<std::pair<std::string, std::string>>;

class PrometheusText {
 public:
  // Starts a family, or goes back to it (the same type); type is "gauge", "counter" or "histogram".
  // Counters are named without "_total": their HELP, TYPE and samples get it (what client_python
  // writes for vLLM).
  void family(std::string_view name, std::string_view type, std::string_view help);
  // One sample of the current family (gauge or counter).
  void sample(const Labels& labels, double value);
  // The _bucket (cumulative, with le), _sum and _count samples of the current histogram family.
  void histogram(const Labels& labels, const Histogram& h);

  // A whole one-sample family.
  void gauge(std::string_view name, std::string_view help, const Labels& labels, double value);
  void counter(std::string_view name, std::string_view help, const Labels& labels, double value);
  void histogram(std::string_view name, std::string_view help, const Labels& labels, const Histogram& h);

  std::string text() const;

 private:
  struct Family {
    std::string type;
    std::string text;  // HELP, TYPE, then the samples
  };
  void line(std::string_view name, const Labels& labels, double value,
            const std::pair<std::string, std::string>* extra);

  std::vector<Family> families_;
  std::unordered_map<std::string, size_t> index_;  // name -> families_
  std::string name_, type_;
  std::string* out_ = nullptr;  // the current family's text
};

// Label value escaping: backslash, double quote and newline.
std::string escape_label_value(std::string_view v);
// Sample values as Prometheus expects: integers without exponent, +Inf/-Inf/NaN spelled out.
std::string format_sample_value(double v);
// Histogram bounds as Python's prometheus_client writes them: "1.0", "0.25", "+Inf".
std::string format_le(double v);

}  // namespace dsv4::server
