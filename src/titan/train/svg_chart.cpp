#include "titan/train/svg_chart.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "titan/core/error.h"
#include "titan/core/xml_escape.h"

namespace titan::train {

namespace {

constexpr double kMargin = 10;
constexpr double kTickFont = 11, kTitleFont = 13, kLegendFont = 12;

// Text widths are estimated (the SVG viewer picks the font): about 0.6 em per character.
double text_width(const std::string& text, double font_size) {
  return 0.6 * font_size * static_cast<double>(text.size());
}

struct Box {
  double left, top, right, bottom;
  double width() const { return right - left; }
  double height() const { return bottom - top; }
};

// A line with many more points than the plot has pixel columns would make the
// file large for nothing: keep each column's first, lowest, highest and last
// point (in step order), which draws the same picture.
std::vector<std::pair<double, double>> thin_out(const std::vector<std::pair<double, double>>& points, double x_low,
                                                double x_high, double columns) {
  if (static_cast<double>(points.size()) <= 4 * columns || x_high <= x_low) return points;
  std::vector<std::pair<double, double>> kept;
  size_t begin = 0;
  while (begin < points.size()) {
    const auto column = [&](size_t i) { return std::floor((points[i].first - x_low) / (x_high - x_low) * columns); };
    size_t end = begin;
    size_t lowest = begin, highest = begin;
    while (end < points.size() && column(end) == column(begin)) {
      if (points[end].second < points[lowest].second) lowest = end;
      if (points[end].second > points[highest].second) highest = end;
      ++end;
    }
    std::vector<size_t> picks{begin, lowest, highest, end - 1};
    std::sort(picks.begin(), picks.end());
    picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
    for (size_t i : picks) kept.push_back(points[i]);
    begin = end;
  }
  return kept;
}

void render_panel(std::string& svg, const ChartPanel& panel, const Box& cell) {
  // The data's extent over every line of the panel.
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min, y_min = x_min, y_max = -x_min;
  std::vector<std::vector<std::pair<double, double>>> finite(panel.lines.size());
  for (size_t i = 0; i < panel.lines.size(); ++i) {
    for (const auto& [x, y] : panel.lines[i].points) {
      if (!std::isfinite(x) || !std::isfinite(y)) continue;
      finite[i].emplace_back(x, y);
      x_min = std::min(x_min, x), x_max = std::max(x_max, x);
      y_min = std::min(y_min, y), y_max = std::max(y_max, y);
    }
  }
  if (!std::isfinite(x_min)) x_min = 0, x_max = 1, y_min = 0, y_max = 1;

  const double title_height = 26, x_axis_height = 34, y_title_width = 18;
  const double plot_height = std::max(10.0, cell.height() - title_height - x_axis_height);
  const AxisTicks y_ticks = nice_ticks(y_min, y_max, std::clamp(static_cast<int>(plot_height / 40), 2, 8), false);
  const double y_largest = std::max(std::abs(y_ticks.low), std::abs(y_ticks.high));
  double label_width = 0;
  for (double value : y_ticks.values) {
    label_width = std::max(label_width, text_width(tick_label(value, y_ticks.step, y_largest), kTickFont));
  }
  const Box plot{cell.left + y_title_width + label_width + 6, cell.top + title_height, cell.right - 12,
                 cell.top + title_height + plot_height};
  const AxisTicks x_ticks = nice_ticks(x_min, x_max, std::max(3, static_cast<int>(plot.width() / 60)), true);
  const double x_largest = std::max(std::abs(x_ticks.low), std::abs(x_ticks.high));
  const auto px = [&](double x) { return plot.left + (x - x_ticks.low) / (x_ticks.high - x_ticks.low) * plot.width(); };
  const auto py = [&](double y) {
    return plot.bottom - (y - y_ticks.low) / (y_ticks.high - y_ticks.low) * plot.height();
  };

  svg += fmt::format("<g class=\"panel\" data-metric=\"{}\">\n", xml_escape(panel.id));
  svg += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"{}\" font-weight=\"bold\">{}</text>\n",
      (plot.left + plot.right) / 2, cell.top + 16, kTitleFont, xml_escape(panel.title));
  // Grid lines and tick labels.
  for (double value : y_ticks.values) {
    const double y = py(value);
    svg += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e0e0e0\" stroke-width=\"1\"/>\n",
        plot.left, y, plot.right, y);
    svg +=
        fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"end\" font-size=\"{}\">{}</text>\n", plot.left - 4,
                    y + kTickFont * 0.35, kTickFont, xml_escape(tick_label(value, y_ticks.step, y_largest)));
  }
  for (double value : x_ticks.values) {
    const double x = px(value);
    svg += fmt::format(
        "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#e0e0e0\" stroke-width=\"1\"/>\n", x,
        plot.top, x, plot.bottom);
    svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"{}\">{}</text>\n", x,
                       plot.bottom + 14, kTickFont, xml_escape(tick_label(value, x_ticks.step, x_largest)));
  }
  svg += fmt::format(
      "<rect x=\"{:.1f}\" y=\"{:.1f}\" width=\"{:.1f}\" height=\"{:.1f}\" fill=\"none\" stroke=\"#444\" "
      "stroke-width=\"1\"/>\n",
      plot.left, plot.top, plot.width(), plot.height());
  // Axis titles: x under the tick labels, y turned along the left edge.
  svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"{}\">{}</text>\n",
                     (plot.left + plot.right) / 2, plot.bottom + 29, kTickFont, xml_escape(panel.x_title));
  const double y_title_x = cell.left + 12, y_title_y = (plot.top + plot.bottom) / 2;
  svg += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"{}\" "
      "transform=\"rotate(-90 {:.1f} {:.1f})\">{}</text>\n",
      y_title_x, y_title_y, kTickFont, y_title_x, y_title_y, xml_escape(panel.y_title));

  for (size_t i = 0; i < panel.lines.size(); ++i) {
    const ChartLine& line = panel.lines[i];
    if (finite[i].empty()) continue;
    std::string points;
    for (const auto& [x, y] : thin_out(finite[i], x_ticks.low, x_ticks.high, plot.width())) {
      points += fmt::format("{}{:.1f},{:.1f}", points.empty() ? "" : " ", px(x), py(y));
    }
    svg += fmt::format(
        "<polyline class=\"{}\" points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"1.5\" "
        "stroke-linejoin=\"round\"{}><title>{}</title></polyline>\n",
        xml_escape(line.css_class), points, xml_escape(line.colour), line.dashed ? " stroke-dasharray=\"6,4\"" : "",
        xml_escape(line.label));
    // A line of one point draws nothing; a dot shows where it is.
    if (finite[i].size() == 1) {
      svg += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"2.5\" fill=\"{}\"/>\n", px(finite[i][0].first),
                         py(finite[i][0].second), xml_escape(line.colour));
    }
  }
  svg += "</g>\n";
}

}  // namespace

AxisTicks nice_ticks(double low, double high, int target, bool integer) {
  TITAN_CHECK(std::isfinite(low) && std::isfinite(high) && low <= high,
              "svg_chart.cpp: an axis needs a finite range, got [{}, {}]", low, high);
  if (high == low) {
    // One value: a small range around it, so it sits mid-axis.
    const double pad = low == 0 ? 1 : std::abs(low) * 0.1;
    low -= integer ? std::max(1.0, pad) : pad;
    high += integer ? std::max(1.0, pad) : pad;
  }
  const double raw = (high - low) / std::max(1, target - 1);
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  const double fraction = raw / magnitude;
  double step = (fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10) * magnitude;
  if (integer) step = std::max(step, 1.0);
  AxisTicks ticks;
  ticks.step = step;
  ticks.low = std::floor(low / step) * step;
  ticks.high = std::ceil(high / step) * step;
  for (int64_t i = 0;; ++i) {
    double value = ticks.low + static_cast<double>(i) * step;
    if (value > ticks.high + step * 1e-9) break;
    if (std::abs(value) < step * 1e-9) value = 0;  // not -1.7e-17
    ticks.values.push_back(value);
  }
  return ticks;
}

std::string tick_label(double value, double step, double largest) {
  if (value == 0) return "0";
  // Big round numbers (tokens/s) in thousands or millions; tiny ones (learning
  // rates) in scientific notation with the digits the step needs at the axis's
  // largest value, so every label of an axis has the same form; the rest with
  // the step's decimals.
  if (step >= 1e3) {
    const double unit = step >= 1e9 ? 1e9 : step >= 1e6 ? 1e6 : 1e3;
    const char* suffix = unit == 1e9 ? "G" : unit == 1e6 ? "M" : "k";
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step / unit) + 1e-9)));
    return fmt::format("{:.{}f}{}", value / unit, decimals, suffix);
  }
  if (step < 1e-4) {
    const double exponent = std::floor(std::log10(std::max(std::abs(largest), step)) + 1e-9);
    const int digits = std::clamp(static_cast<int>(exponent - std::floor(std::log10(step) + 1e-9)), 0, 3);
    return fmt::format("{:.{}e}", value, digits);
  }
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  return fmt::format("{:.{}f}", value, decimals);
}

std::string render_svg(const Chart& chart) {
  const double width = chart.width, height = chart.height;
  std::string svg = fmt::format(
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n"
      "<rect x=\"0\" y=\"0\" width=\"{}\" height=\"{}\" fill=\"white\"/>\n",
      chart.width, chart.height, chart.width, chart.height, chart.width, chart.height);
  double y = kMargin;
  if (!chart.title.empty()) {
    svg += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" text-anchor=\"middle\" font-size=\"16\" "
        "font-weight=\"bold\">{}</text>\n",
        width / 2, y + 15, xml_escape(chart.title));
    y += 24;
  }
  // The legend: swatch and label per entry, wrapping onto more rows as needed.
  if (!chart.legend.empty()) {
    svg += "<g class=\"legend\">\n";
    double x = kMargin;
    const double row_height = 18;
    for (const ChartLegendEntry& entry : chart.legend) {
      const double entry_width = 30 + text_width(entry.label, kLegendFont) + 16;
      if (x > kMargin && x + entry_width > width - kMargin) x = kMargin, y += row_height;
      svg += fmt::format(
          "<line x1=\"{:.1f}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"{}\" stroke-width=\"2.5\"{}/>\n", x,
          y + 9, x + 24, y + 9, xml_escape(entry.colour), entry.dashed ? " stroke-dasharray=\"6,4\"" : "");
      svg += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" font-size=\"{}\">{}</text>\n", x + 30, y + 13, kLegendFont,
                         xml_escape(entry.label));
      x += entry_width;
    }
    y += row_height + 4;
    svg += "</g>\n";
  }
  // Panels in a grid whose cells are about as wide as they are tall.
  const int count = static_cast<int>(chart.panels.size());
  if (count > 0) {
    const int columns =
        std::clamp(static_cast<int>(std::lround(std::sqrt(count * width / std::max(1.0, height - y)))), 1, count);
    const int rows = (count + columns - 1) / columns;
    const double cell_width = (width - 2 * kMargin) / columns;
    const double cell_height = (height - kMargin - y) / rows;
    for (int i = 0; i < count; ++i) {
      const int row = i / columns, column = i % columns;
      const double left = kMargin + column * cell_width, top = y + row * cell_height;
      render_panel(svg, chart.panels[static_cast<size_t>(i)], Box{left, top, left + cell_width, top + cell_height});
    }
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace titan::train
