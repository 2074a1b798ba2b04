// A small SVG writer for line charts in a grid of panels, enough for the benchmark's picture without a
// plotting dependency. The output is plain SVG 1.1 that browsers and image viewers show, and it keeps
// its data readable by programs: each panel is a <g class="panel" id=...> holding its plot area as
// <rect class="plot-area"> with data-x-min/-max and data-y-min/-max (the value range it maps), and each
// series is a <polyline class="series" id="PANEL-SERIES" data-label=...> in that area's pixels.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace dsv4::bench {

struct ChartSeries {
  std::string id, label, color;
  std::vector<std::pair<double, double>> points;  // (x, y) in data units
};

struct ChartPanel {
  std::string id, title, x_label, y_label;
  std::vector<ChartSeries> series;
};

std::string render_svg(const std::string& title, const std::vector<ChartPanel>& panels, int columns = 2);

// Text escaped for XML character data and attribute values.
std::string xml_escape(const std::string& s);

}  // namespace dsv4::bench
