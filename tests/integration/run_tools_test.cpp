// `titan plot` and `titan compare` on real tiny training runs made with the
// CLI, and reading a run's metrics.jsonl back (resumed steps, summary records).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "cli_job.h"
#include "titan/core/error.h"
#include "titan/train/run_history.h"

namespace titan {
namespace run_tools_test {

namespace fs = std::filesystem;
using testing::file_text;

const std::string kCli = TITAN_CLI_PATH;

const fs::path& workdir() {
  static const fs::path dir = fs::path(::testing::TempDir()) / "run_tools_test";
  return dir;
}

struct Result {
  int exit_code = -1;
  std::string output;
};

Result run(const std::string& arguments) {
  Result result;
  const int status = testing::run_command(kCli + " " + arguments, workdir() / "last_command.log", &result.output);
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

bool contains(const std::string& text, const std::string& fragment) { return text.find(fragment) != std::string::npos; }

// The verdict line `titan compare` prints for a metric.
std::string verdict_line(const std::string& output, const std::string& metric) {
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream words(line);
    std::string first;
    if (words >> first && first == metric) return line;
  }
  return "";
}

// 8 steps of the tiny Llama (2 x 64 tokens: a fraction of a second) with validation at steps 4 and 8.
std::string job(const std::string& name, const std::string& extra = "") {
  return testing::tiny_train_command(workdir() / "data", workdir() / "config.json", workdir() / name,
                                     "--training.steps 8 --training.seq_len 64 --training.local_batch_size 2 "
                                     "--validation.freq 4 --validation.steps 1 --checkpoint.enable true " +
                                         extra);
}

// A copy of a run's metrics.jsonl with `edit` applied to each step record (the goodput summary is kept as is).
fs::path edited_copy(const std::string& run, const std::string& name,
                     const std::function<void(nlohmann::json&)>& edit) {
  fs::create_directories(workdir() / name);
  std::ifstream in(workdir() / run / "metrics.jsonl");
  std::ofstream out(workdir() / name / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains("step")) edit(record);
    out << record.dump() << "\n";
  }
  return workdir() / name;
}

class RunTools : public ::testing::Test {
 protected:
  // CTest runs each test in its own process: the runs are shared between
  // them, and redone only when titan or this test changed.
  static void SetUpTestSuite() {
    const std::string stamp = fmt::format("{} {}", fs::last_write_time(kCli).time_since_epoch().count(),
                                          fs::last_write_time("/proc/self/exe").time_since_epoch().count());
    if (file_text(workdir() / "stamp") == stamp) return;
    fs::remove_all(workdir());
    fs::create_directories(workdir());
    testing::prepare_test_corpus(workdir() / "data", workdir() / "prepare.log");
    testing::write_tiny_llama_config(workdir());
    const fs::path log = workdir() / "setup.log";
    // Two straight runs of the same job: deterministic on the CPU, so bitwise equal.
    testing::run_ok(job("straight_1"), log);
    testing::run_ok(job("straight_2"), log);
    // A run stopped after step 4 (the test hook raises a real SIGTERM; the run
    // saves step 4 and exits), copied, and both copies continued to step 8:
    // "resumed" unchanged, "half_lr" with half the learning rate.
    testing::run_ok("TITAN_TEST_SIGTERM_AT_STEP=4 " + job("resumed"), log);
    fs::copy(workdir() / "resumed", workdir() / "half_lr", fs::copy_options::recursive);
    testing::run_ok(job("resumed"), log);
    testing::run_ok(job("half_lr", "--optimizer.lr 1e-3"), log);
    std::ofstream(workdir() / "stamp") << stamp;
  }
};

// --- plot -------------------------------------------------------------------

// Checks the document is well formed as far as tags go (every element closed,
// in order, one <svg> root, attribute quotes paired); returns the root's start tag.
std::string check_well_formed(const std::string& svg) {
  std::vector<std::string> open;
  std::string root;
  int roots = 0;
  for (size_t at = svg.find('<'); at != std::string::npos; at = svg.find('<', at + 1)) {
    const size_t end = svg.find('>', at);
    EXPECT_NE(end, std::string::npos) << "unterminated tag at " << at;
    if (end == std::string::npos) break;
    const std::string tag = svg.substr(at, end - at + 1);
    EXPECT_EQ(std::count(tag.begin(), tag.end(), '"') % 2, 0) << tag;
    if (tag.starts_with("<?") || tag.starts_with("<!--")) continue;
    if (tag.starts_with("</")) {
      const std::string name = tag.substr(2, tag.size() - 3);
      EXPECT_FALSE(open.empty()) << "stray " << tag;
      if (open.empty()) break;
      EXPECT_EQ(open.back(), name) << "at " << at;
      open.pop_back();
      continue;
    }
    const std::string name = tag.substr(1, tag.find_first_of(" />", 1) - 1);
    if (open.empty()) ++roots, root = tag;
    if (tag[tag.size() - 2] != '/') open.push_back(name);
  }
  EXPECT_TRUE(open.empty()) << "unclosed <" << (open.empty() ? "" : open.back()) << ">";
  EXPECT_EQ(roots, 1);
  EXPECT_TRUE(root.starts_with("<svg ")) << root;
  return root;
}

std::string attribute(const std::string& tag, const std::string& name) {
  std::smatch match;
  const std::regex pattern(" " + name + "=\"([^\"]*)\"");
  return std::regex_search(tag, match, pattern) ? match[1].str() : std::string("(none)");
}

struct Panel {
  std::string metric;
  std::vector<std::string> series, validation;  // the polylines' points attributes
};

std::vector<Panel> panels_of(const std::string& svg) {
  std::vector<Panel> panels;
  const std::regex polyline("<polyline class=\"(series|validation)\" points=\"([^\"]*)\"");
  for (size_t at = svg.find("<g class=\"panel\""); at != std::string::npos;
       at = svg.find("<g class=\"panel\"", at + 1)) {
    const std::string group = svg.substr(at, svg.find("</g>", at) - at);
    Panel panel;
    panel.metric = attribute(group.substr(0, group.find('>')), "data-metric");
    for (auto it = std::sregex_iterator(group.begin(), group.end(), polyline); it != std::sregex_iterator(); ++it) {
      ((*it)[1] == "series" ? panel.series : panel.validation).push_back((*it)[2]);
    }
    panels.push_back(panel);
  }
  return panels;
}

// Every point of a polyline's points attribute, checked to lie inside the image.
size_t count_points(const std::string& points, int width, int height) {
  std::istringstream pairs(points);
  size_t count = 0;
  for (std::string pair; pairs >> pair; ++count) {
    double x = -1, y = -1;
    EXPECT_EQ(std::sscanf(pair.c_str(), "%lf,%lf", &x, &y), 2) << pair;
    EXPECT_TRUE(x >= 0 && x <= width && y >= 0 && y <= height) << pair;
  }
  return count;
}

TEST_F(RunTools, PlotOverlaysEveryRunInEachMetricPanel) {
  const fs::path output = workdir() / "three_runs.svg";
  fs::remove(output);
  const Result result =
      run(fmt::format("plot {} {} {} --output {}", (workdir() / "straight_1").string(),
                      (workdir() / "resumed").string(), (workdir() / "half_lr").string(), output.string()));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::string svg = file_text(output);
  const std::string root = check_well_formed(svg);
  EXPECT_EQ(attribute(root, "width"), "1200");
  EXPECT_EQ(attribute(root, "height"), "900");
  for (const char* name : {"straight_1", "resumed", "half_lr"}) EXPECT_TRUE(contains(svg, name)) << name;

  // Every panel the CPU runs have, one solid line of all 8 steps per run; validation (steps 4 and 8) dashed.
  const std::vector<Panel> panels = panels_of(svg);
  std::vector<std::string> metrics;
  for (const Panel& panel : panels) {
    SCOPED_TRACE(panel.metric);
    metrics.push_back(panel.metric);
    ASSERT_EQ(panel.series.size(), 3u);
    for (const std::string& points : panel.series) EXPECT_EQ(count_points(points, 1200, 900), 8u);
    EXPECT_EQ(panel.validation.size(), panel.metric == "loss" ? 3u : 0u);
    for (const std::string& points : panel.validation) EXPECT_EQ(count_points(points, 1200, 900), 2u);
  }
  EXPECT_EQ(metrics, (std::vector<std::string>{"loss", "lr", "grad_norm", "tokens_per_second", "mfu_percent",
                                               "peak_memory_gib"}));
  // The half-lr run's learning rate is lower from step 5 on: its last lr point sits lower (larger y).
  const auto last_y = [](const std::string& points) { return std::stod(points.substr(points.rfind(',') + 1)); };
  EXPECT_GT(last_y(panels[1].series[2]), last_y(panels[1].series[1]));
  EXPECT_EQ(panels[1].series[0], panels[1].series[1]);  // straight and resumed: the same curve
}

TEST_F(RunTools, PlotHonoursTheStatedSizeAndLeavesOutMetricsNoRunHas) {
  // A run that logged only loss and lr: two panels.
  const fs::path sparse = edited_copy("straight_1", "loss_and_lr_only", [](nlohmann::json& record) {
    record = nlohmann::json{{"step", record["step"]}, {"loss", record["loss"]}, {"lr", record["lr"]}};
  });
  const fs::path output = workdir() / "small.svg";
  const Result result = run(fmt::format("plot {} {} --output {} --width 640 --height 480", sparse.string(),
                                        (workdir() / "straight_2").string(), output.string()));
  ASSERT_EQ(result.exit_code, 0) << result.output;
  const std::string svg = file_text(output);
  const std::string root = check_well_formed(svg);
  EXPECT_EQ(attribute(root, "width"), "640");
  EXPECT_EQ(attribute(root, "height"), "480");
  for (const Panel& panel : panels_of(svg)) {
    const size_t runs_with_metric = panel.metric == "loss" || panel.metric == "lr" ? 2 : 1;
    EXPECT_EQ(panel.series.size(), runs_with_metric) << panel.metric;
    for (const std::string& points : panel.series) EXPECT_EQ(count_points(points, 640, 480), 8u);
  }
  EXPECT_EQ(panels_of(svg).size(), 6u);

  const fs::path only_sparse = workdir() / "sparse_only.svg";
  ASSERT_EQ(run(fmt::format("plot {} -o {}", sparse.string(), only_sparse.string())).exit_code, 0);
  const std::vector<Panel> panels = panels_of(file_text(only_sparse));
  ASSERT_EQ(panels.size(), 2u);
  EXPECT_EQ(panels[0].metric, "loss");
  EXPECT_EQ(panels[1].metric, "lr");
}

TEST_F(RunTools, PlotToAPngIsAClearError) {
  fs::remove(workdir() / "curves.png");
  const Result result =
      run(fmt::format("plot {} --output {}", (workdir() / "straight_1").string(), (workdir() / "curves.png").string()));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_TRUE(contains(result.output, "SVG only")) << result.output;
  EXPECT_FALSE(fs::exists(workdir() / "curves.png"));
}

// --- compare ----------------------------------------------------------------

TEST_F(RunTools, CompareOfTwoIdenticalRunsIsBitwiseEqual) {
  const Result result =
      run(fmt::format("compare {} {}", (workdir() / "straight_1").string(), (workdir() / "straight_2").string()));
  EXPECT_EQ(result.exit_code, 0) << result.output;
  for (const char* metric : {"loss", "grad_norm", "lr", "validation_loss", "tokens"}) {
    EXPECT_TRUE(contains(verdict_line(result.output, metric), "bitwise equal")) << metric << "\n" << result.output;
  }
  // Timing and memory are left out by default: they differ run to run.
  EXPECT_EQ(verdict_line(result.output, "tokens_per_second"), "") << result.output;
  EXPECT_FALSE(contains(result.output, "diverges")) << result.output;
  EXPECT_TRUE(contains(result.output, "runs match")) << result.output;

  // A run stopped at step 4 and resumed continues bit for bit (on the CPU).
  const Result resumed =
      run(fmt::format("compare {} {}", (workdir() / "straight_1").string(), (workdir() / "resumed").string()));
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
}

TEST_F(RunTools, CompareNamesTheFirstStepTheRunsDiverge) {
  const Result result =
      run(fmt::format("compare {} {}", (workdir() / "resumed").string(), (workdir() / "half_lr").string()));
  EXPECT_EQ(result.exit_code, 1) << result.output;
  // Both runs share steps 1-4 (one run's folder, copied at its step-4
  // checkpoint). Step 5 is the first step of another learning rate, so the lr
  // logged at step 5 differs; step 5's loss and grad norm are still those of
  // the shared step-4 weights, and differ from step 6, after the first update
  // with the other learning rate.
  EXPECT_TRUE(contains(verdict_line(result.output, "lr"), "diverges from step 5 (A=")) << result.output;
  EXPECT_TRUE(contains(verdict_line(result.output, "loss"), "diverges from step 6")) << result.output;
  EXPECT_TRUE(contains(verdict_line(result.output, "grad_norm"), "diverges from step 6")) << result.output;
  EXPECT_TRUE(contains(verdict_line(result.output, "validation_loss"), "diverges from step 8")) << result.output;
  EXPECT_TRUE(contains(verdict_line(result.output, "tokens"), "bitwise equal")) << result.output;
  EXPECT_TRUE(contains(result.output, "runs differ from step 5:")) << result.output;

  // --metrics picks what is compared.
  const Result tokens_only = run(fmt::format("compare {} {} --metrics tokens,peak_memory_gib",
                                             (workdir() / "resumed").string(), (workdir() / "half_lr").string()));
  EXPECT_EQ(verdict_line(tokens_only.output, "loss"), "") << tokens_only.output;
  EXPECT_TRUE(contains(verdict_line(tokens_only.output, "tokens"), "bitwise equal")) << tokens_only.output;
  EXPECT_NE(verdict_line(tokens_only.output, "peak_memory_gib"), "") << tokens_only.output;
}

TEST_F(RunTools, CompareWithinAToleranceThatCoversTheDifference) {
  // straight_2 with its step-3 loss moved by one part in 10^7.
  double loss = 0;
  const fs::path nudged = edited_copy("straight_2", "nudged", [&](nlohmann::json& record) {
    if (record["step"] == 3) loss = record["loss"], record["loss"] = loss * (1 + 1e-7);
  });
  const std::string runs = fmt::format("{} {}", (workdir() / "straight_1").string(), nudged.string());

  const Result bitwise = run("compare " + runs);
  EXPECT_EQ(bitwise.exit_code, 1) << bitwise.output;
  EXPECT_TRUE(contains(verdict_line(bitwise.output, "loss"), fmt::format("diverges from step 3 (A={}, B=", loss)))
      << bitwise.output;

  const Result relative = run("compare " + runs + " --rtol 1e-6");
  EXPECT_EQ(relative.exit_code, 0) << relative.output;
  EXPECT_TRUE(contains(verdict_line(relative.output, "loss"), "within tolerance (max abs diff ")) << relative.output;
  EXPECT_TRUE(contains(verdict_line(relative.output, "loss"), "max rel diff 1e-07)")) << relative.output;
  EXPECT_TRUE(contains(verdict_line(relative.output, "grad_norm"), "bitwise equal")) << relative.output;

  const Result absolute = run("compare " + runs + " --atol 1e-5");
  EXPECT_EQ(absolute.exit_code, 0) << absolute.output;
  EXPECT_TRUE(contains(verdict_line(absolute.output, "loss"), "within tolerance")) << absolute.output;

  const Result too_tight = run("compare " + runs + " --atol 1e-8");
  EXPECT_EQ(too_tight.exit_code, 1) << too_tight.output;
}

// A run that stopped early (here: only its first step is left) differs from
// one that went on, though every step they share is equal; --common-steps
// compares the shared steps alone.
TEST_F(RunTools, ARunThatStoppedEarlyDiffersUnlessOnlyCommonStepsAreAsked) {
  fs::create_directories(workdir() / "stopped_early");
  {
    std::ifstream in(workdir() / "straight_2" / "metrics.jsonl");
    std::ofstream out(workdir() / "stopped_early" / "metrics.jsonl");
    std::string first;
    std::getline(in, first);
    out << first << "\n";
  }
  const std::string runs =
      fmt::format("{} {}", (workdir() / "straight_1").string(), (workdir() / "stopped_early").string());
  const Result stopped = run("compare " + runs);
  EXPECT_EQ(stopped.exit_code, 1) << stopped.output;
  EXPECT_TRUE(contains(stopped.output, "runs differ: they logged different steps")) << stopped.output;
  EXPECT_TRUE(contains(stopped.output, "--common-steps")) << stopped.output;
  EXPECT_FALSE(contains(stopped.output, "runs match")) << stopped.output;
  const Result common = run("compare " + runs + " --common-steps");
  EXPECT_EQ(common.exit_code, 0) << common.output;
  EXPECT_TRUE(contains(common.output, "runs match: ")) << common.output;
  EXPECT_TRUE(contains(common.output, "over 1 common step(s)")) << common.output;
}

TEST_F(RunTools, CompareOfBadInputExitsTwoNamingTheFileAndLine) {
  // Line 3 cut short, as a hand edit or a broken copy might leave it.
  fs::create_directories(workdir() / "malformed");
  std::string text = file_text(workdir() / "straight_2" / "metrics.jsonl");
  size_t third = 0;
  for (int i = 0; i < 2; ++i) third = text.find('\n', third) + 1;
  text.erase(third + 40, text.find('\n', third) - third - 40);
  std::ofstream(workdir() / "malformed" / "metrics.jsonl") << text;

  const Result malformed =
      run(fmt::format("compare {} {}", (workdir() / "straight_1").string(), (workdir() / "malformed").string()));
  EXPECT_EQ(malformed.exit_code, 2) << malformed.output;
  EXPECT_TRUE(contains(malformed.output, (workdir() / "malformed" / "metrics.jsonl").string() + ":3:"))
      << malformed.output;

  const Result missing =
      run(fmt::format("compare {} {}", (workdir() / "straight_1").string(), (workdir() / "no_such_run").string()));
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_TRUE(contains(missing.output, "no_such_run")) << missing.output;

  const Result unknown = run(fmt::format("compare {} {} --metrics no_such_metric", (workdir() / "straight_1").string(),
                                         (workdir() / "straight_2").string()));
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_TRUE(contains(unknown.output, "no_such_metric")) << unknown.output;
}

// --- run history ------------------------------------------------------------

TEST_F(RunTools, RunHistoryTakesTheLaterRecordOfAStepAndSkipsSummaries) {
  // A job that logged steps 1-3 (validation at 3), was resumed from step 1 and
  // logged 2-3 again (no validation this time), and wrote a goodput summary.
  const fs::path folder = workdir() / "resumed_twice";
  fs::create_directories(folder);
  std::ofstream(folder / "metrics.jsonl")
      << R"({"step": 1, "loss": 5.0, "lr": 0.1, "pipeline_rank_bubble": [0.25, 0.5]})"
         "\n"
         R"({"step": 2, "loss": 4.0, "lr": 0.2})"
         "\n"
         R"({"step": 3, "loss": 3.0, "lr": 0.3, "validation_loss": 3.5})"
         "\n"
         R"({"goodput": {"percent": 80.0}})"
         "\n"
         R"({"step": 2, "loss": 4.25, "lr": 0.2, "note": "text"})"
         "\n"
         "\n"
         R"({"step": 3, "loss": null, "lr": 0.3})"
         "\n"
         R"({"goodput": {"percent": 70.0}})"
         "\n";
  const train::RunHistory history = train::read_run_history(folder);
  EXPECT_EQ(history.name, "resumed_twice");
  EXPECT_EQ(history.steps, (std::vector<int64_t>{1, 2, 3}));
  ASSERT_NE(history.find("loss"), nullptr);
  const train::MetricSeries& loss = *history.find("loss");
  EXPECT_EQ(loss.size(), 3u);
  EXPECT_EQ(loss.at(1), 5.0);
  EXPECT_EQ(loss.at(2), 4.25);
  EXPECT_TRUE(std::isnan(loss.at(3)));  // JSON's null: how a NaN loss is written
  // The later step-3 record replaced the earlier one whole: no validation loss is left.
  EXPECT_EQ(history.find("validation_loss"), nullptr);
  EXPECT_EQ(history.find("goodput"), nullptr);
  EXPECT_EQ(history.find("note"), nullptr);
  ASSERT_NE(history.find("pipeline_rank_bubble/1"), nullptr);
  EXPECT_EQ(history.find("pipeline_rank_bubble/1")->at(1), 0.5);
  // The same run named by its file.
  EXPECT_EQ(train::read_run_history(folder / "metrics.jsonl").steps, history.steps);

  // compare reads it the same way: only the final records count.
  const fs::path clean = workdir() / "clean";
  fs::create_directories(clean);
  std::ofstream(clean / "metrics.jsonl") << R"({"step": 1, "loss": 5.0, "lr": 0.1})"
                                            "\n"
                                            R"({"step": 2, "loss": 4.25, "lr": 0.2})"
                                            "\n"
                                            R"({"step": 3, "loss": null, "lr": 0.3})"
                                            "\n";
  const Result result = run(fmt::format("compare {} {}", folder.string(), clean.string()));
  EXPECT_EQ(result.exit_code, 0) << result.output;

  // A malformed line is an error naming the file and the line.
  std::ofstream(folder / "metrics.jsonl", std::ios::app) << "{\"step\": 4, \"loss\": \n";
  try {
    train::read_run_history(folder);
    ADD_FAILURE() << "a malformed line was accepted";
  } catch (const Error& error) {
    EXPECT_TRUE(contains(error.what(), (folder / "metrics.jsonl").string() + ":9:")) << error.what();
  }
}

}  // namespace run_tools_test
}  // namespace titan
