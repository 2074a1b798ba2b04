#include "bench_client/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace dsv4::bench {
namespace {

constexpr double kPanelW = 460, kPanelH = 300, kTitleH = 40;
constexpr double kLeft = 64, kRight = 16, kTop = 34, kBottom = 46;  // margins of the plot area in a panel

struct Range {
  double lo = 0, hi = 1;
};

// A step of 1, 2 or 5 x 10^k giving about `ticks` intervals over the range.
double nice_step(double span, int ticks) {
  const double raw = span / ticks;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0}) {
    if (m * mag >= raw) return m * mag;
  }
  return 10 * mag;
}

// From zero (every quantity plotted is non-negative) to a round number at or above the largest value.
Range data_range(const ChartPanel& p, bool y) {
  double hi = 0;
  for (const auto& s : p.series) {
    for (const auto& [px, py] : s.points) hi = std::max(hi, y ? py : px);
  }
  if (!(hi > 0)) return {0, 1};
  const double step = nice_step(hi, 5);
  return {0, std::ceil(hi / step) * step};
}

std::string fmt_tick(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e9) return fmt::format("{}", static_cast<int64_t>(v));
  return fmt::format("{:.3g}", v);
}

struct Area {
  double x, y, w, h;
  Range xr, yr;
  double px(double v) const { return x + (v - xr.lo) / (xr.hi - xr.lo) * w; }
  double py(double v) const { return y + h - (v - yr.lo) / (yr.hi - yr.lo) * h; }
};

std::string axes(const Area& a, const ChartPanel& p) {
  std::string out;
  const double xs = nice_step(a.xr.hi - a.xr.lo, 5), ys = nice_step(a.yr.hi - a.yr.lo, 5);
  for (double v = a.xr.lo; v <= a.xr.hi + xs / 2; v += xs) {
    out += fmt::format(R"(<line class="grid" x1="{0:.1f}" y1="{1:.1f}" x2="{0:.1f}" y2="{2:.1f}" stroke="#ddd"/>)"
                       "\n<text x=\"{0:.1f}\" y=\"{3:.1f}\" text-anchor=\"middle\">{4}</text>\n",
                       a.px(v), a.y, a.y + a.h, a.y + a.h + 16, fmt_tick(v));
  }
  for (double v = a.yr.lo; v <= a.yr.hi + ys / 2; v += ys) {
    out += fmt::format(R"(<line class="grid" x1="{0:.1f}" y1="{1:.1f}" x2="{2:.1f}" y2="{1:.1f}" stroke="#ddd"/>)"
                       "\n<text x=\"{3:.1f}\" y=\"{4:.1f}\" text-anchor=\"end\">{5}</text>\n",
                       a.x, a.py(v), a.x + a.w, a.x - 6, a.py(v) + 4, fmt_tick(v));
  }
  out += fmt::format("<text class=\"x-label\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\">{}</text>\n",
                     a.x + a.w / 2, a.y + a.h + 36, xml_escape(p.x_label));
  out += fmt::format(
      "<text class=\"y-label\" transform=\"translate({:.1f},{:.1f}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n",
      a.x - 46, a.y + a.h / 2, xml_escape(p.y_label));
  return out;
}

std::string series(const Area& a, const ChartPanel& p, const ChartSeries& s, size_t index) {
  std::string pts;
  for (const auto& [x, y] : s.points) pts += fmt::format("{}{:.2f},{:.2f}", pts.empty() ? "" : " ", a.px(x), a.py(y));
  std::string out = fmt::format(
      "<polyline class=\"series\" id=\"{}-{}\" data-label=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" "
      "points=\"{}\"/>\n",
      xml_escape(p.id), xml_escape(s.id), xml_escape(s.label), xml_escape(s.color), pts);
  const double ly = a.y + 14 + 16 * static_cast<double>(index);  // legend, top right
  out += fmt::format(R"(<line x1="{0:.1f}" y1="{1:.1f}" x2="{2:.1f}" y2="{1:.1f}" stroke="{3}" stroke-width="2"/>)"
                     "\n<text x=\"{4:.1f}\" y=\"{5:.1f}\">{6}</text>\n",
                     a.x + a.w - 120, ly, a.x + a.w - 100, xml_escape(s.color), a.x + a.w - 96, ly + 4,
                     xml_escape(s.label));
  return out;
}

std::string panel(const ChartPanel& p, double ox, double oy) {
  Area a{ox + kLeft,           oy + kTop,          kPanelW - kLeft - kRight, kPanelH - kTop - kBottom,
         data_range(p, false), data_range(p, true)};
  std::string out = fmt::format("<g class=\"panel\" id=\"{}\">\n", xml_escape(p.id));
  out += fmt::format(
      "<text class=\"panel-title\" x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" "
      "font-weight=\"bold\">{}</text>\n",
      ox + kPanelW / 2, oy + 20, xml_escape(p.title));
  out += fmt::format(
      "<rect class=\"plot-area\" x=\"{:.2f}\" y=\"{:.2f}\" width=\"{:.2f}\" height=\"{:.2f}\" fill=\"none\" "
      "stroke=\"#888\" data-x-min=\"{}\" data-x-max=\"{}\" data-y-min=\"{}\" data-y-max=\"{}\"/>\n",
      a.x, a.y, a.w, a.h, a.xr.lo, a.xr.hi, a.yr.lo, a.yr.hi);
  out += axes(a, p);
  for (size_t i = 0; i < p.series.size(); ++i) out += series(a, p, p.series[i], i);
  return out + "</g>\n";
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string render_svg(const std::string& title, const std::vector<ChartPanel>& panels, int columns) {
  const int cols = std::max(1, columns);
  const auto rows = static_cast<int>((panels.size() + static_cast<size_t>(cols) - 1) / static_cast<size_t>(cols));
  const double w = kPanelW * cols, h = kTitleH + kPanelH * std::max(rows, 1);
  std::string out = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"{0}\" height=\"{1}\" "
      "viewBox=\"0 0 {0} {1}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text class=\"title\" x=\"{2}\" y=\"26\" text-anchor=\"middle\" font-size=\"16\">{3}</text>\n",
      w, h, w / 2, xml_escape(title));
  for (size_t i = 0; i < panels.size(); ++i) {
    const auto col = static_cast<double>(i % static_cast<size_t>(cols));
    const auto row = static_cast<double>(i / static_cast<size_t>(cols));
    out += panel(panels[i], col * kPanelW, kTitleH + row * kPanelH);
  }
  return out + "</svg>\n";
}

}  // namespace dsv4::bench
