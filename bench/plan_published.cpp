#include "bench/plan_published.h"

#include <fmt/format.h>

#include <toml++/toml.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "bench/json_report.h"
#include "titan/core/error.h"
#include "titan/plan/cost_model.h"

#ifndef TITAN_BENCH_DIR
#define TITAN_BENCH_DIR ""
#endif

namespace titan::bench {
namespace {

constexpr double published_gib = 1024.0 * 1024.0 * 1024.0;
// The target: a prediction within 20% of the published figure.
constexpr double published_tolerance = 0.20;

// Reads one TOML table's keys, each once, so that a key nobody read (a typo
// in the data file) is an error naming the file and the row.
class PublishedTomlReader {
 public:
  PublishedTomlReader(const toml::table& table, std::string where) : table_(table), where_(std::move(where)) {}

  bool has(const char* key) const { return table_.contains(key); }

  std::string text(const char* key, const std::string& fallback, bool required = false) {
    const toml::node* node = take(key, required);
    if (node == nullptr) return fallback;
    const auto value = node->value<std::string>();
    TITAN_CHECK(value.has_value(), "{}: `{}` must be a string", where_, key);
    return *value;
  }
  int64_t integer(const char* key, int64_t fallback, bool required = false) {
    const toml::node* node = take(key, required);
    if (node == nullptr) return fallback;
    TITAN_CHECK(node->is_integer(), "{}: `{}` must be an integer", where_, key);
    return *node->value<int64_t>();
  }
  double number(const char* key, double fallback) {
    const toml::node* node = take(key, false);
    if (node == nullptr) return fallback;
    // Figures such as 5762 are written as integers, others as 597.3.
    if (node->is_integer()) return static_cast<double>(*node->value<int64_t>());
    TITAN_CHECK(node->is_floating_point(), "{}: `{}` must be a number", where_, key);
    return *node->value<double>();
  }
  bool flag(const char* key, bool fallback) {
    const toml::node* node = take(key, false);
    if (node == nullptr) return fallback;
    TITAN_CHECK(node->is_boolean(), "{}: `{}` must be true or false", where_, key);
    return *node->value<bool>();
  }
  std::vector<std::string> texts(const char* key) {
    std::vector<std::string> out;
    const toml::node* node = take(key, false);
    if (node == nullptr) return out;
    const toml::array* array = node->as_array();
    TITAN_CHECK(array != nullptr, "{}: `{}` must be an array of strings", where_, key);
    for (const toml::node& item : *array) {
      const auto value = item.value<std::string>();
      TITAN_CHECK(value.has_value(), "{}: `{}` must be an array of strings", where_, key);
      out.push_back(*value);
    }
    return out;
  }
  // Every key must have been read.
  void finish() const {
    for (const auto& [key, node] : table_) {
      TITAN_CHECK(read_.count(std::string(key.str())) > 0, "{}: unknown key `{}`", where_, key.str());
    }
  }
  const std::string& where() const { return where_; }

 private:
  const toml::node* take(const char* key, bool required) {
    read_.insert(key);
    const toml::node* node = table_.get(key);
    TITAN_CHECK(node != nullptr || !required, "{}: `{}` is required", where_, key);
    return node;
  }

  const toml::table& table_;
  std::string where_;
  std::set<std::string> read_;
};

PublishedHardware read_published_hardware(const std::string& name, const toml::table& table, const std::string& path) {
  PublishedTomlReader r(table, fmt::format("{}: [hardware.{}]", path, name));
  PublishedHardware hw;
  hw.name = name;
  hw.device = r.text("device", "", true);
  hw.source = r.text("source", "", true);
  hw.memory_gb = r.number("memory_gb", 0.0);
  hw.memory_gib = r.number("memory_gib", 0.0);
  hw.memory_gbps = r.number("memory_gbps", 0.0);
  hw.inter_node_gbits = r.number("inter_node_gbits", 0.0);
  hw.bf16_tflops = r.number("bf16_tflops", 0.0);
  hw.fp8_tflops = r.number("fp8_tflops", 0.0);
  hw.power_watts = r.integer("power_watts", 0);
  hw.chip_stated = r.flag("chip_stated", true);
  r.finish();
  TITAN_CHECK(hw.memory_gb == 0.0 || hw.memory_gib == 0.0, "{}: give memory_gb or memory_gib, not both", r.where());
  for (double v : {hw.memory_gb, hw.memory_gib, hw.memory_gbps, hw.inter_node_gbits, hw.bf16_tflops, hw.fp8_tflops}) {
    TITAN_CHECK(v >= 0.0, "{}: overrides must not be negative", r.where());
  }
  return hw;
}

PublishedRow read_published_row(const toml::table& table, size_t index, const PublishedFigures& figures,
                                const std::string& path) {
  const std::string id = table.get("id") != nullptr ? table.get("id")->value_or(std::string()) : std::string();
  PublishedTomlReader r(table, fmt::format("{}: row {} ({})", path, index + 1, id.empty() ? "no id" : id));
  PublishedRow row;
  row.id = r.text("id", "", true);
  row.source = r.text("source", "", true);
  row.section = r.text("section", "", true);
  row.hardware = r.text("hardware", "", true);
  row.verified = r.flag("verified", true);
  TITAN_CHECK(!row.source.empty() && !row.section.empty(), "{}: `source` and `section` must name where the figures are",
              r.where());
  TITAN_CHECK(figures.hardware.count(row.hardware) > 0, "{}: hardware `{}` has no [hardware.{}] table", r.where(),
              row.hardware, row.hardware);

  plan::PlanRequest& q = row.request;
  q.model = r.text("model", "", true);
  q.flavor = r.text("flavor", "", true);
  q.devices = r.integer("devices", 0, true);
  q.devices_per_node = r.integer("devices_per_node", 0);
  q.seq_len = r.integer("seq_len", 0, true);
  q.compile = r.flag("compile", false);
  q.software = "torchtitan";  // every figure is TorchTitan's: its kernels are costed
  q.float8 = r.flag("float8", false);
  row.async_tp = r.flag("async_tp", false);
  TITAN_CHECK(q.devices > 0 && q.seq_len > 0, "{}: `devices` and `seq_len` must be positive", r.where());

  const std::string layout_kind = r.text("layout", "given");
  TITAN_CHECK(layout_kind == "given" || layout_kind == "search", "{}: `layout` is \"search\" or absent, not \"{}\"",
              r.where(), layout_kind);
  row.search = layout_kind == "search";

  plan::Layout& l = row.layout;
  l.dp_replicate = r.integer("dp_replicate", 1);
  l.dp_shard = r.integer("dp_shard", 1);
  l.cp = r.integer("cp", 1);
  l.tp = r.integer("tp", 1);
  l.pp = r.integer("pp", 1);
  l.ep = r.integer("ep", 1);
  l.pipeline_schedule = r.text("pipeline_schedule", "");
  l.stages_per_rank = r.integer("stages_per_rank", 1);
  row.microbatches = r.integer("microbatches", l.pp);
  row.local_batch = r.integer("local_batch", 0, !row.search);
  row.global_batch = r.integer("global_batch", 0, !row.search);
  l.activation_checkpoint = r.text("activation_checkpoint", "", !row.search);

  row.published_tps_per_device = r.number("published_tps_per_device", 0.0);
  row.published_memory_gib = r.number("published_memory_gib", 0.0);
  row.published_mfu = r.number("published_mfu", 0.0);
  row.assumed = r.texts("assumed");
  r.finish();

  TITAN_CHECK(row.published_tps_per_device > 0 || row.published_memory_gib > 0 || row.published_mfu > 0,
              "{}: no published figure (published_tps_per_device, published_memory_gib or published_mfu)", r.where());
  TITAN_CHECK(row.published_tps_per_device >= 0 && row.published_memory_gib >= 0 && row.published_mfu >= 0 &&
                  row.published_mfu <= 1.0,
              "{}: published figures must be positive and MFU a fraction", r.where());
  // Only the request matters when titan chooses the layout.
  if (row.search) return row;

  for (int64_t degree : {l.dp_replicate, l.dp_shard, l.cp, l.tp, l.pp, l.ep}) {
    TITAN_CHECK(degree >= 1, "{}: parallel degrees must be at least 1", r.where());
  }
  TITAN_CHECK(l.devices() == q.devices, "{}: dp_replicate x dp_shard x cp x tp x pp = {}, but devices = {}", r.where(),
              l.devices(), q.devices);
  TITAN_CHECK(
      l.activation_checkpoint == "none" || l.activation_checkpoint == "selective" || l.activation_checkpoint == "full",
      "{}: activation_checkpoint is none, selective or full, not \"{}\"", r.where(), l.activation_checkpoint);
  TITAN_CHECK((l.pp > 1) == !l.pipeline_schedule.empty(), "{}: pipeline_schedule is set exactly when pp > 1",
              r.where());
  TITAN_CHECK(row.local_batch > 0 && row.microbatches > 0 && row.local_batch % row.microbatches == 0,
              "{}: local_batch {} must divide into {} micro-batches", r.where(), row.local_batch, row.microbatches);
  TITAN_CHECK(row.global_batch > 0 && row.global_batch % (row.local_batch * l.dp()) == 0,
              "{}: global_batch {} is not a multiple of local_batch {} x data-parallel degree {}", r.where(),
              row.global_batch, row.local_batch, l.dp());
  l.local_batch_size = row.local_batch;
  // Without a pipeline the enumerator writes the whole local batch as the micro-batch.
  l.microbatch_size = l.pp > 1 ? row.local_batch / row.microbatches : row.local_batch;
  l.gradient_accumulation = row.global_batch / (row.local_batch * l.dp());
  if (l.pp == 1) l.stages_per_rank = 1;

  q.global_batch_tokens = row.global_batch * q.seq_len;
  // Enumerate around the published job: its schedule and checkpointing mode.
  if (l.pp > 1) q.schedules = {l.pipeline_schedule};
  q.activation_modes = {l.activation_checkpoint};
  return row;
}

struct PublishedComparison {
  double published = 0.0, predicted = 0.0;
  bool present() const { return published > 0.0; }
  double ratio() const { return predicted / published; }
  bool within() const { return present() && std::abs(ratio() - 1.0) <= published_tolerance; }
};

std::string published_ratio_text(const PublishedComparison& c) {
  return c.present() ? fmt::format("{:.2f}{}", c.ratio(), c.within() ? "" : "*") : "-";
}

}  // namespace

std::string published_figures_default_path() {
  return (std::filesystem::path(TITAN_BENCH_DIR) / "published_figures.toml").string();
}

PublishedFigures load_published_figures(const std::string& path) {
  TITAN_CHECK(std::filesystem::is_regular_file(path), "published figures: no file {}", path);
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& error) {
    fail("{}: {}", path, error.description());
  }
  PublishedFigures figures;
  for (const auto& [key, node] : root) {
    TITAN_CHECK(key.str() == "hardware" || key.str() == "row", "{}: unknown top-level key `{}`", path, key.str());
  }
  const toml::table* hardware = root["hardware"].as_table();
  TITAN_CHECK(hardware != nullptr, "{}: no [hardware.*] tables", path);
  for (const auto& [name, node] : *hardware) {
    const toml::table* table = node.as_table();
    TITAN_CHECK(table != nullptr, "{}: hardware.{} must be a table", path, name.str());
    figures.hardware.emplace(std::string(name.str()), read_published_hardware(std::string(name.str()), *table, path));
  }
  const toml::array* rows = root["row"].as_array();
  TITAN_CHECK(rows != nullptr && !rows->empty(), "{}: no [[row]] entries", path);
  std::set<std::string> ids;
  for (size_t i = 0; i < rows->size(); ++i) {
    const toml::table* table = rows->get(i)->as_table();
    TITAN_CHECK(table != nullptr, "{}: row {} must be a table", path, i + 1);
    PublishedRow row = read_published_row(*table, i, figures, path);
    TITAN_CHECK(ids.insert(row.id).second, "{}: row id `{}` appears twice", path, row.id);
    figures.rows.push_back(std::move(row));
  }
  return figures;
}

plan::DeviceProfile published_row_device(const PublishedFigures& figures, const PublishedRow& row) {
  const PublishedHardware& hw = figures.hardware.at(row.hardware);
  plan::DeviceProfile device = plan::published_device_profile(hw.device);
  if (hw.memory_gb > 0) device.memory_bytes = hw.memory_gb * 1e9;
  if (hw.memory_gib > 0) device.memory_bytes = hw.memory_gib * published_gib;
  if (hw.memory_gbps > 0) device.memory_bytes_per_second = hw.memory_gbps * 1e9;
  if (hw.inter_node_gbits > 0) device.inter_node.bytes_per_second = hw.inter_node_gbits * 1e9 / 8.0;
  if (hw.bf16_tflops > 0) device.bf16_flops = hw.bf16_tflops * 1e12;
  if (hw.fp8_tflops > 0) device.fp8_flops = hw.fp8_tflops * 1e12;
  device.description += fmt::format(" (as {}: {})", hw.name, hw.source);
  return device;
}

bool same_published_layout(const plan::Layout& a, const plan::Layout& b) {
  const bool degrees = a.dp_replicate == b.dp_replicate && a.dp_shard == b.dp_shard && a.cp == b.cp && a.tp == b.tp &&
                       a.pp == b.pp && a.ep == b.ep;
  const bool batch = a.local_batch_size == b.local_batch_size && a.gradient_accumulation == b.gradient_accumulation &&
                     a.activation_checkpoint == b.activation_checkpoint;
  // Micro-batching and stages only mean something under a pipeline.
  const bool pipeline = a.pp == 1 || (a.pipeline_schedule == b.pipeline_schedule &&
                                      a.stages_per_rank == b.stages_per_rank && a.microbatch_size == b.microbatch_size);
  return degrees && batch && pipeline;
}

int run_plan_published_bench(const PlanPublishedOptions& options) {
  const std::string path = options.figures_path.empty() ? published_figures_default_path() : options.figures_path;
  const PublishedFigures figures = load_published_figures(path);
  std::printf("titan bench plan-published: the cost model against published figures (%s)\n", path.c_str());
  std::printf("ratios are predicted / published; * marks one outside +-%.0f%%\n\n", 100.0 * published_tolerance);
  std::printf("%-32s %-9s %9s %9s %6s | %7s %7s %6s | %6s %6s %6s\n", "row", "device", "TPS pub", "TPS pred", "ratio",
              "GiB pub", "GiB prd", "ratio", "MFU pb", "MFU pr", "ratio");

  nlohmann::json json_rows = nlohmann::json::array();
  int tps_n = 0, tps_k = 0, mem_n = 0, mem_k = 0, mfu_n = 0, mfu_k = 0;
  std::vector<std::string> notes;
  for (const PublishedRow& row : figures.rows) {
    if (!options.ids.empty() && std::find(options.ids.begin(), options.ids.end(), row.id) == options.ids.end()) {
      continue;
    }
    if (options.quick && row.search) continue;
    const plan::DeviceProfile device = published_row_device(figures, row);
    plan::PlanRequest request = row.request;
    if (request.devices_per_node <= 0) request.devices_per_node = device.devices_per_node;
    nlohmann::json entry = {{"id", row.id},
                            {"source", row.source},
                            {"section", row.section},
                            {"hardware", row.hardware},
                            {"device", device.name},
                            {"verified", row.verified},
                            {"async_tp", row.async_tp},
                            {"compile", request.compile},
                            {"float8", request.float8}};
    try {
      const plan::ModelUnderPlan model = plan::model_under_plan(request);
      const std::vector<plan::Layout> layouts = plan::enumerate_layouts(request, model.config);
      plan::Layout layout = row.layout;
      bool enumerated = false;
      std::optional<plan::StepPrediction> prediction;
      if (row.search) {
        // The source names no layout: titan's best that fits stands in for it.
        for (const plan::Layout& candidate : layouts) {
          plan::StepPrediction p = plan::predict_step(model, request, candidate, device);
          if (!p.fits) continue;
          if (!prediction || p.tokens_per_second_per_device > prediction->tokens_per_second_per_device) {
            prediction = std::move(p);
          }
        }
        TITAN_CHECK(prediction.has_value(), "none of the {} layouts titan enumerates fits in memory", layouts.size());
        layout = prediction->layout;
        enumerated = true;
      } else {
        // Cost the enumerator's own copy of the layout when it has one (its
        // conventions for the fields a layout leaves open), else the row's.
        for (const plan::Layout& candidate : layouts) {
          if (same_published_layout(candidate, row.layout)) {
            layout = candidate;
            enumerated = true;
            break;
          }
        }
        prediction = plan::predict_step(model, request, layout, device);
      }
      const plan::StepPrediction& p = *prediction;
      const PublishedComparison tps{row.published_tps_per_device, p.tokens_per_second_per_device};
      const PublishedComparison mem{row.published_memory_gib, p.memory_bytes / published_gib};
      const PublishedComparison mfu{row.published_mfu, p.mfu};
      tps_n += tps.present();
      tps_k += tps.within();
      mem_n += mem.present();
      mem_k += mem.within();
      mfu_n += mfu.present();
      mfu_k += mfu.within();
      auto shown = [](const PublishedComparison& c, const char* format, double scale) {
        return c.present() ? fmt::format(fmt::runtime(format), scale * c.published) : std::string("-");
      };
      std::printf("%-32s %-9s %9s %9.0f %6s | %7s %7.1f %6s | %6s %5.1f%% %6s\n", row.id.c_str(), device.name.c_str(),
                  shown(tps, "{:.0f}", 1.0).c_str(), tps.predicted, published_ratio_text(tps).c_str(),
                  shown(mem, "{:.1f}", 1.0).c_str(), mem.predicted, published_ratio_text(mem).c_str(),
                  shown(mfu, "{:.1f}%", 100.0).c_str(), 100.0 * mfu.predicted, published_ratio_text(mfu).c_str());
      std::string note =
          fmt::format("{}: {}{}{}; {}", row.id, layout.describe(), enumerated ? "" : " [not enumerated by titan]",
                      row.async_tp ? " [async TP costed as plain TP]" : "", p.reasons());
      if (!p.fits) note += " [does not fit]";
      if (!row.verified) note += " [source unverified]";
      notes.push_back(note);
      auto figure = [](const PublishedComparison& c) {
        return c.present() ? nlohmann::json{{"published", c.published},
                                            {"predicted", c.predicted},
                                            {"ratio", c.ratio()},
                                            {"within_tolerance", c.within()}}
                           : nlohmann::json{{"predicted", c.predicted}};
      };
      entry["layout"] = layout.describe();
      entry["enumerated"] = enumerated;
      entry["fits"] = p.fits;
      entry["step_seconds"] = p.step_seconds;
      entry["tokens_per_second_per_device"] = figure(tps);
      entry["memory_gib"] = figure(mem);
      entry["mfu"] = figure(mfu);
      entry["reasons"] = p.reasons();
    } catch (const Error& error) {
      std::printf("%-32s %-9s error: %s\n", row.id.c_str(), device.name.c_str(), error.what());
      entry["error"] = error.what();
    }
    json_rows.push_back(std::move(entry));
  }
  std::printf("\n");
  for (const std::string& note : notes) std::printf("  %s\n", note.c_str());
  const int n = tps_n + mem_n + mfu_n, k = tps_k + mem_k + mfu_k;
  std::printf("\nwithin +-%.0f%%: %d of %d (throughput %d of %d, memory %d of %d, MFU %d of %d)\n",
              100.0 * published_tolerance, k, n, tps_k, tps_n, mem_k, mem_n, mfu_k, mfu_n);
  write_json_report(options.json_path, {{"figures", path},
                                        {"tolerance", published_tolerance},
                                        {"rows", json_rows},
                                        {"within",
                                         {{"all", k},
                                          {"of", n},
                                          {"throughput", tps_k},
                                          {"throughput_of", tps_n},
                                          {"memory", mem_k},
                                          {"memory_of", mem_n},
                                          {"mfu", mfu_k},
                                          {"mfu_of", mfu_n}}}});
  return 0;
}

}  // namespace titan::bench
