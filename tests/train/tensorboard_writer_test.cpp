// TensorBoard event files against an independent reader
// (tests/reference/read_tensorboard.py: Debian's python3-protobuf decoding a
// schema written from the published field numbers, its own CRC-32C): every
// number of a metrics record comes back as the same float32 under its tag;
// a corrupted byte is caught by the framing's checksums; and a real job run
// through the CLI writes events that match its metrics.jsonl step for step.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "data/peer_support.h"
#include "titan/train/metrics.h"
#include "titan/train/tensorboard_writer.h"

namespace titan {
namespace tensorboard_writer_test {

namespace fs = std::filesystem;
using data::testing::read_bytes;
using data::testing::run_command;
using data::testing::run_titan;
using data::testing::shell_quote;
using data::testing::TempDir;
using data::testing::write_bytes;

data::testing::CommandResult run_reader(const fs::path& target) {
  return run_command(fmt::format("{} {} {}", TITAN_PYTHON,
                                 shell_quote(std::string(TITAN_REFERENCE_SCRIPTS_DIR) + "/read_tensorboard.py"),
                                 shell_quote(target.string())));
}

// The reader's events (a file, or every event file of a folder), one JSON object each.
std::vector<nlohmann::json> read_events(const fs::path& target) {
  const auto run = run_reader(target);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  std::vector<nlohmann::json> events;
  std::istringstream lines(run.output);
  for (std::string line; std::getline(lines, line);) events.push_back(nlohmann::json::parse(line));
  return events;
}

// What a record should become, worked out here rather than by the writer:
// each number under its key, each number of an array under key/<index>.
std::map<std::string, double> expected_scalars(const nlohmann::json& record) {
  std::map<std::string, double> scalars;
  for (const auto& [key, value] : record.items()) {
    if (key == "step") continue;
    if (value.is_number()) scalars[key] = value.get<double>();
    if (value.is_array()) {
      for (size_t i = 0; i < value.size(); ++i) scalars[fmt::format("{}/{}", key, i)] = value[i].get<double>();
    }
  }
  return scalars;
}

// One scalar event per record, in order: the same step, exactly the expected
// tags, and each value the record's as a float32.
void expect_events_match(const std::vector<nlohmann::json>& events, const std::vector<nlohmann::json>& records) {
  ASSERT_EQ(events.size(), records.size() + 1);  // the file_version event first
  EXPECT_EQ(events[0].value("file_version", ""), "brain.Event:2");
  EXPECT_TRUE(events[0]["values"].empty());
  for (size_t i = 0; i < records.size(); ++i) {
    const nlohmann::json& event = events[i + 1];
    const int64_t step = records[i]["step"];
    EXPECT_EQ(event["step"].get<int64_t>(), step);
    EXPECT_GT(event["wall_time"].get<double>(), 1.6e9) << "step " << step;
    EXPECT_GE(event["wall_time"].get<double>(), events[i]["wall_time"].get<double>()) << "step " << step;
    const std::map<std::string, double> expected = expected_scalars(records[i]);
    std::map<std::string, double> got;
    for (const auto& [tag, value] : event["values"].items()) got[tag] = value.get<double>();
    EXPECT_EQ(got.size(), expected.size()) << "step " << step << ": " << event.dump();
    for (const auto& [tag, value] : expected) {
      ASSERT_TRUE(got.count(tag)) << "step " << step << " lacks " << tag;
      EXPECT_EQ(static_cast<float>(got[tag]), static_cast<float>(value)) << "step " << step << " " << tag;
    }
  }
}

// The one event file a writer left in `folder`.
fs::path only_event_file(const fs::path& folder) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(folder)) files.push_back(entry.path());
  EXPECT_EQ(files.size(), 1u) << folder;
  return files.empty() ? fs::path() : files[0];
}

std::vector<train::StepMetrics> sample_metrics() {
  std::vector<train::StepMetrics> steps;
  train::StepMetrics m;
  m.step = 1;
  m.total_steps = 3;
  m.loss = 10.123456789;
  m.grad_norm = 3.75;
  m.lr = 2e-4 / 3;
  m.step_seconds = 0.0123;
  m.host_seconds = 0.01;
  m.data_seconds = 0.001;
  m.tokens = 123456789;  // more digits than a float32 holds
  m.tokens_per_second = 1.0e7 / 3;
  m.tflops = 0.5;
  m.mfu_percent = 12.5;
  m.peak_memory_gib = 1.0 / 3;
  m.alloc_retries = 2;
  m.elapsed_seconds = 1e-9;
  steps.push_back(m);

  m.step = 2;
  m.loss = 1e-30;  // a float32 denormal
  m.validation_loss = 7.25;
  m.aux_loss = -0.1;
  m.expert_load_mean = 1.3;
  m.expert_load_worst = 2.6;
  m.expert_load_worst_layer = 4;
  m.comm_busy_seconds = 0.004;
  m.comm_exposed_seconds = 0.001;
  steps.push_back(m);

  m.step = 3;
  m.validation_loss.reset();
  m.pipeline_bubble = 0.2;
  m.pipeline_rank_bubble = {0.1, 0.3};
  m.pipeline_rank_peak_memory_gib = {1.5, 2.25};
  m.context_parallel_rank_attention_seconds = {0.01, 0.02, 0.03};
  m.context_parallel_rank_wait_seconds = {0.001, 0.002, 0.003};
  m.context_parallel_rank_peak_memory_gib = {1, 2, 3};
  m.context_parallel_rank_step_memory_gib = {0.5, 0.25, 0.125};
  m.checkpoint_stall_seconds = 1.5;
  steps.push_back(m);
  return steps;
}

TEST(TensorBoardWriter, ReaderDecodesEveryMetricAsFloat32) {
  TempDir dir;
  const fs::path folder = dir / "tb" / "nested";  // created by the writer
  std::vector<nlohmann::json> records;
  {
    train::TensorBoardWriter writer(folder.string());
    EXPECT_EQ(fs::path(writer.path()).parent_path(), folder);
    EXPECT_EQ(fs::path(writer.path()).filename().string().rfind("events.out.tfevents.", 0), 0u) << writer.path();
    for (const train::StepMetrics& m : sample_metrics()) {
      records.push_back(train::metrics_record(m));
      writer.add_scalars(m.step, records.back());
      // Readable while the writer is still open: every event is in the file when add_scalars returns.
      EXPECT_EQ(read_events(writer.path()).size(), records.size() + 1);
    }
  }
  ASSERT_TRUE(records[1].contains("validation_loss"));
  ASSERT_TRUE(records[2].contains("context_parallel_rank_wait_seconds"));
  expect_events_match(read_events(only_event_file(folder)), records);

  // A second writer on the folder starts its own file and leaves the first alone.
  train::TensorBoardWriter second(folder.string());
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(folder)) files.push_back(entry.path());
  EXPECT_EQ(files.size(), 2u);
  EXPECT_EQ(read_events(folder).size(), records.size() + 2);
}

TEST(TensorBoardWriter, ImagesReachTheReader) {
  TempDir dir;
  const std::string png("\x89PNG\r\n\x1a\n any bytes: the reader does not decode them", 54);
  {
    train::TensorBoardWriter writer((dir / "tb").string());
    writer.add_image(7, "validation/image_0", 32, 48, png);
  }
  const std::vector<nlohmann::json> events = read_events(only_event_file(dir / "tb"));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1]["step"], 7);
  const nlohmann::json& image = events[1]["images"]["validation/image_0"];
  EXPECT_EQ(image["height"], 32);
  EXPECT_EQ(image["width"], 48);
  EXPECT_EQ(image["colorspace"], 3);  // RGB
  std::string hex;
  for (const unsigned char c : png) hex += fmt::format("{:02x}", c);
  EXPECT_EQ(image["hex"], hex);
}

TEST(TensorBoardWriter, OnlyNumbersBecomeScalars) {
  TempDir dir;
  train::TensorBoardWriter writer((dir / "tb").string());
  const nlohmann::json record = {
      {"step", 9},   {"flag", true},     {"name", "llama"}, {"nested", {{"a", 1}}}, {"mixed", {1, "x", 2.5}},
      {"count", -3}, {"big", 1ull << 40}};
  writer.add_scalars(-5, record);
  const auto events = read_events(writer.path());
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1]["step"].get<int64_t>(), -5);
  const nlohmann::json expected = {{"count", -3.0}, {"big", 1099511627776.0}, {"mixed/0", 1.0}, {"mixed/2", 2.5}};
  EXPECT_EQ(events[1]["values"], expected) << events[1].dump();
}

// The goodput record after the last step: its numbers under goodput/<field>,
// the restart tier as a tag of its own, in the same event file as the steps.
TEST(TensorBoardWriter, GoodputRecordBecomesScalars) {
  TempDir dir;
  {
    train::MetricsLogger logger((dir / "metrics.jsonl").string(), false, false, (dir / "tb").string());
    logger.log_record({{"goodput",
                        {{"goodput_percent", 90.5},
                         {"lost_to_restart_steps", 3},
                         {"restart_tier", "replica"},
                         {"recover_seconds", 1.25}}}},
                      20);
  }
  const auto events = read_events(only_event_file(dir / "tb"));
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[1]["step"].get<int64_t>(), 20);
  const nlohmann::json expected = {{"goodput/goodput_percent", 90.5},
                                   {"goodput/lost_to_restart_steps", 3.0},
                                   {"goodput/restart_tier/replica", 1.0},
                                   {"goodput/recover_seconds", 1.25}};
  EXPECT_EQ(events[1]["values"], expected) << events[1].dump();
  EXPECT_NE(data::testing::read_bytes(dir / "metrics.jsonl").find("\"restart_tier\":\"replica\""), std::string::npos);
}

TEST(TensorBoardWriter, ReaderChecksBothChecksums) {
  TempDir dir;
  std::string path;
  {
    train::TensorBoardWriter writer((dir / "tb").string());
    path = writer.path();
    for (const train::StepMetrics& m : sample_metrics()) writer.add_scalars(m.step, train::metrics_record(m));
  }
  const std::string good = read_bytes(path);
  ASSERT_EQ(run_reader(path).exit_code, 0);
  // A byte of the last record's data, then a byte of the first record's length field.
  for (const auto& [offset, part] : {std::pair{good.size() - 10, "data"}, std::pair{size_t{3}, "length"}}) {
    std::string bad = good;
    bad[offset] = static_cast<char>(bad[offset] ^ 0x20);
    write_bytes(path, bad);
    const auto run = run_reader(path);
    EXPECT_NE(run.exit_code, 0) << part;
    EXPECT_NE(run.output.find(fmt::format("CRC mismatch in the {}", part)), std::string::npos) << run.output;
    EXPECT_NE(run.output.find(path), std::string::npos) << run.output;
  }
}

// A few steps of a small job through `titan train`, with validation so that
// the optional fields appear: the event file holds exactly metrics.jsonl.
TEST(TensorBoardWriter, CliJobEventsMatchMetricsJsonl) {
  TempDir dir;
  const fs::path data = dir / "data", dump = dir / "dump";
  const auto prepare =
      run_titan(fmt::format("data prepare --input /usr/share/games/fortunes/debian --format fortune "
                            "--train-tokenizer 300 --output {}",
                            shell_quote(data.string())));
  ASSERT_EQ(prepare.exit_code, 0) << prepare.output;
  const auto train = run_titan(fmt::format(
      "train --config {} --job.dump_folder {} --training.dataset_path {} --model.tokenizer_path {} "
      "--training.seq_len 32 --training.local_batch_size 2 --training.steps 4 --lr_scheduler.warmup_steps 1 "
      "--metrics.peak_tflops 1 --metrics.progress false --validation.freq 2 --validation.steps 1 "
      "--validation.split 0.1 --checkpoint.enable false --metrics.enable_tensorboard true "
      "--metrics.save_tb_folder board",
      shell_quote(std::string(TITAN_SOURCE_DIR) + "/configs/llama3_debug.toml"), shell_quote(dump.string()),
      shell_quote(data.string()), shell_quote((data / "tokenizer.json").string())));
  ASSERT_EQ(train.exit_code, 0) << train.output;

  std::vector<nlohmann::json> records;
  nlohmann::json goodput;
  std::ifstream jsonl(dump / "metrics.jsonl");
  // The step records, then the job's goodput record, which follows them as an event at the last step.
  for (std::string line; std::getline(jsonl, line);) {
    nlohmann::json record = nlohmann::json::parse(line);
    if (record.contains("step")) records.push_back(std::move(record));
    if (record.contains("goodput")) goodput = record["goodput"];
  }
  ASSERT_EQ(records.size(), 4u);
  ASSERT_TRUE(goodput.is_object());
  EXPECT_TRUE(records[1].contains("validation_loss")) << records[1].dump();
  const fs::path event_file = only_event_file(dump / "board");
  EXPECT_NE(event_file.filename().string().find("tfevents"), std::string::npos);
  std::vector<nlohmann::json> events = read_events(event_file);
  ASSERT_EQ(events.size(), records.size() + 2);
  const nlohmann::json last = events.back();
  events.pop_back();
  expect_events_match(events, records);
  EXPECT_EQ(last["step"].get<int64_t>(), 4);
  for (const char* field : {"goodput_percent", "wall_seconds", "productive_seconds", "lost_to_restart_steps"}) {
    const std::string tag = std::string("goodput/") + field;
    ASSERT_TRUE(last["values"].contains(tag)) << last.dump();
    EXPECT_EQ(static_cast<float>(last["values"][tag].get<double>()), static_cast<float>(goodput[field].get<double>()))
        << tag;
  }
}

}  // namespace tensorboard_writer_test
}  // namespace titan
