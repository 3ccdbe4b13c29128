// `titan plot RUN_DIR [RUN_DIR ...] --output runs.svg`: the training curves of
// one or more runs (their metrics.jsonl) overlaid in one SVG, a panel per
// metric: loss (validation dashed), learning rate, grad norm, tokens/s, MFU and
// peak memory against step. Panels no run has a value for are left out.
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <memory>

#include "titan/cli/numeric_checks.h"
#include "titan/cli/subcommands.h"
#include "titan/core/error.h"
#include "titan/train/run_history.h"
#include "titan/train/svg_chart.h"

namespace titan::cli {

namespace {

namespace fs = std::filesystem;

struct PlotArguments {
  std::vector<std::string> runs;
  std::string output;
  int width = 1200, height = 900;
};

struct PanelSpec {
  const char* metric;
  const char* title;
  const char* y_title;
};

// Tableau's ten colours: distinct from one another, also in grey-scale print.
constexpr const char* kColours[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::vector<std::pair<double, double>> points_of(const train::MetricSeries* series) {
  std::vector<std::pair<double, double>> points;
  if (series == nullptr) return points;
  for (const auto& [step, value] : *series) points.emplace_back(static_cast<double>(step), value);
  return points;
}

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(), [](unsigned char c) { return std::tolower(c); });
  return text;
}

train::Chart build_chart(const std::vector<train::RunHistory>& runs, int width, int height) {
  train::Chart chart;
  chart.width = width;
  chart.height = height;
  chart.title = runs.size() == 1 ? fmt::format("titan run {}", runs[0].name) : "titan runs";
  bool any_validation = false;
  for (size_t r = 0; r < runs.size(); ++r) {
    chart.legend.push_back({runs[r].name, kColours[r % std::size(kColours)], false});
    any_validation = any_validation || runs[r].find("validation_loss") != nullptr;
  }
  if (any_validation) chart.legend.push_back({"validation loss (dashed)", "#444", true});

  const PanelSpec panels[] = {{"loss", "Loss", "loss"},
                              {"lr", "Learning rate", "lr"},
                              {"grad_norm", "Grad norm", "grad norm"},
                              {"tokens_per_second", "Tokens / s", "tokens/s"},
                              {"mfu_percent", "MFU %", "MFU %"},
                              {"peak_memory_gib", "Peak memory (GiB)", "GiB"}};
  for (const PanelSpec& spec : panels) {
    const bool is_loss = std::string(spec.metric) == "loss";
    train::ChartPanel panel;
    panel.id = spec.metric;
    panel.title = is_loss && any_validation ? "Loss (dashed: validation)" : spec.title;
    panel.x_title = "step";
    panel.y_title = spec.y_title;
    bool any = false;
    for (size_t r = 0; r < runs.size(); ++r) {
      const std::string colour = kColours[r % std::size(kColours)];
      const train::MetricSeries* series = runs[r].find(spec.metric);
      any = any || series != nullptr;
      if (series != nullptr) panel.lines.push_back({runs[r].name, colour, false, "series", points_of(series)});
      if (!is_loss) continue;
      const train::MetricSeries* validation = runs[r].find("validation_loss");
      any = any || validation != nullptr;
      if (validation != nullptr) {
        panel.lines.push_back(
            {fmt::format("{} validation", runs[r].name), colour, true, "validation", points_of(validation)});
      }
    }
    if (any) chart.panels.push_back(std::move(panel));
  }
  return chart;
}

}  // namespace

Subcommand make_plot_subcommand() {
  auto args = std::make_shared<PlotArguments>();
  Subcommand subcommand;
  subcommand.add = [args](CLI::App& parent) {
    CLI::App* app = parent.add_subcommand("plot", "plot the training curves of one or more runs into an SVG");
    app->add_option("runs", args->runs, "dump folders (or their metrics.jsonl)")->required();
    app->add_option("--output,-o", args->output, "the SVG file to write")->required();
    app->add_option("--width", args->width, "image width in pixels")->capture_default_str()->check(at_least(1));
    app->add_option("--height", args->height, "image height in pixels")->capture_default_str()->check(at_least(1));
    return app;
  };
  subcommand.run = [args] {
    const std::string extension = lower(fs::path(args->output).extension().string());
    TITAN_CHECK(extension != ".png",
                "--output {}: titan plot writes SVG only, not PNG; name the output .svg (a browser shows it; "
                "rsvg-convert or inkscape turn it into a PNG)",
                args->output);
    TITAN_CHECK(extension == ".svg", "--output {}: titan plot writes SVG; name the output .svg", args->output);
    TITAN_CHECK(args->width >= 200 && args->height >= 150 && args->width <= 20000 && args->height <= 20000,
                "--width {} --height {}: the image must be between 200 x 150 and 20000 x 20000 pixels", args->width,
                args->height);
    std::vector<train::RunHistory> runs;
    for (const std::string& run : args->runs) runs.push_back(train::read_run_history(run));
    // Two runs in folders of the same name would share a legend entry: name those by their paths.
    for (size_t i = 0; i < runs.size(); ++i) {
      for (size_t j = 0; j < runs.size(); ++j) {
        if (i != j && runs[i].name == runs[j].name) runs[i].name = args->runs[i];
      }
    }
    const train::Chart chart = build_chart(runs, args->width, args->height);
    TITAN_CHECK(!chart.panels.empty(),
                "{}: no loss, lr, grad_norm, tokens_per_second, mfu_percent or "
                "peak_memory_gib values to plot",
                fmt::join(args->runs, ", "));
    // Written beside the output and renamed over it, so a reader never sees half a file.
    const fs::path output(args->output), partial(args->output + ".partial");
    {
      std::ofstream file(partial, std::ios::binary | std::ios::trunc);
      TITAN_CHECK(file.good(), "--output {}: cannot be written (does its folder exist?)", args->output);
      file << train::render_svg(chart);
      file.close();
      TITAN_CHECK(file.good(), "--output {}: writing failed (a full disk?)", args->output);
    }
    fs::rename(partial, output);
    std::printf("titan: plotted %zu run(s), %zu panel(s), into %s (%d x %d)\n", runs.size(), chart.panels.size(),
                args->output.c_str(), args->width, args->height);
    return 0;
  };
  return subcommand;
}

}  // namespace titan::cli
