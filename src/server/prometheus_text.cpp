#include "server/prometheus_text.h"

#include <fmt/format.h>

#include <cmath>

#include "core/error.h"

namespace dsv4::server {

std::string escape_label_value(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (const char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string format_sample_value(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::trunc(v) == v && std::fabs(v) < 1e15) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

// Bucket bounds as Python's prometheus_client writes them ("1.0", "0.25"), which vLLM dashboards match on.
std::string format_le(double v) {
  if (std::isinf(v)) return "+Inf";
  if (std::trunc(v) == v && std::fabs(v) < 1e15) return fmt::format("{}.0", static_cast<int64_t>(v));
  return fmt::format("{}", v);
}

void PrometheusText::family(std::string_view name, std::string_view type, std::string_view help) {
  name_ = std::string(name);
  type_ = std::string(type);
  if (const auto it = index_.find(name_); it != index_.end()) {
    Family& f = families_[it->second];
    DSV4_CHECK(f.type == type_, "metrics: family {} started as a {} and again as a {}", name_, f.type, type_);
    out_ = &f.text;
    return;
  }
  index_.emplace(name_, families_.size());
  families_.push_back({type_, {}});
  out_ = &families_.back().text;
  std::string escaped_help;
  for (const char c : help) escaped_help += c == '\n' ? std::string("\\n") : std::string(1, c);
  // A counter's HELP and TYPE name its samples (`x_total`), as client_python writes them: a TYPE line for
  // `x` over `x_total` samples makes prometheus_client's parser split the family in two.
  const std::string header = type_ == "counter" ? name_ + "_total" : name_;
  *out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", header, escaped_help, header, type_);
}

std::string PrometheusText::text() const {
  std::string all;
  for (const Family& f : families_) all += f.text;
  return all;
}

void PrometheusText::line(std::string_view name, const Labels& labels, double value,
                          const std::pair<std::string, std::string>* extra) {
  DSV4_CHECK(out_ != nullptr, "metrics: sample {} before its family", name);
  std::string& out = *out_;
  out += name;
  if (!labels.empty() || extra != nullptr) {
    out += '{';
    bool first = true;
    const auto add = [&](const std::pair<std::string, std::string>& l) {
      if (!first) out += ',';
      first = false;
      out += fmt::format("{}=\"{}\"", l.first, escape_label_value(l.second));
    };
    for (const auto& l : labels) add(l);
    if (extra != nullptr) add(*extra);
    out += '}';
  }
  out += ' ';
  out += format_sample_value(value);
  out += '\n';
}

void PrometheusText::sample(const Labels& labels, double value) {
  line(type_ == "counter" ? name_ + "_total" : name_, labels, value, nullptr);
}

void PrometheusText::histogram(const Labels& labels, const Histogram& h) {
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.counts.size(); ++i) {
    cumulative += h.counts[i];
    const std::pair<std::string, std::string> le{"le", i < h.bounds.size() ? format_le(h.bounds[i]) : "+Inf"};
    line(name_ + "_bucket", labels, static_cast<double>(cumulative), &le);
  }
  line(name_ + "_sum", labels, h.sum, nullptr);
  line(name_ + "_count", labels, static_cast<double>(h.count), nullptr);
}

void PrometheusText::gauge(std::string_view name, std::string_view help, const Labels& labels, double value) {
  family(name, "gauge", help);
  sample(labels, value);
}

void PrometheusText::counter(std::string_view name, std::string_view help, const Labels& labels, double value) {
  family(name, "counter", help);
  sample(labels, value);
}

void PrometheusText::histogram(std::string_view name, std::string_view help, const Labels& labels, const Histogram& h) {
  family(name, "histogram", help);
  histogram(labels, h);
}

}  // namespace dsv4::server
