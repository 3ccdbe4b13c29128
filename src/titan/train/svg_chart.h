// A grid of line-chart panels written as one self-contained SVG document, for
// `titan plot`: axes with ticks at "nice" numbers (1, 2 or 5 times a power of
// ten) and their labels, one polyline per line, a legend. No dependencies: the
// file opens in any browser.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace titan::train {

struct ChartLine {
  std::string label;   // shown as the line's tooltip
  std::string colour;  // any SVG colour
  bool dashed = false;
  std::string css_class;                          // the polyline's class, so tools (and tests) can tell lines apart
  std::vector<std::pair<double, double>> points;  // (x, y); points that are not finite are left out
};

struct ChartPanel {
  std::string id;  // the panel group's data-metric attribute
  std::string title, x_title, y_title;
  std::vector<ChartLine> lines;
};

struct ChartLegendEntry {
  std::string label, colour;
  bool dashed = false;
};

struct Chart {
  int width = 1200, height = 900;  // the SVG's width and height attributes, in pixels
  std::string title;
  std::vector<ChartLegendEntry> legend;
  std::vector<ChartPanel> panels;  // laid out in a grid, row by row
};

// Ticks covering [low, high]: the axis runs from the first to the last.
struct AxisTicks {
  double low = 0, high = 1, step = 1;
  std::vector<double> values;
};
// About `target` ticks; `integer` keeps the step at 1 or more (steps are whole numbers).
AxisTicks nice_ticks(double low, double high, int target, bool integer);
// A tick's label with as many digits as the step needs: "0.25", "18k", "2.5e-05";
// `largest` is the axis's largest magnitude, so all its labels share one form.
std::string tick_label(double value, double step, double largest);

// The whole SVG document.
std::string render_svg(const Chart& chart);

}  // namespace titan::train
