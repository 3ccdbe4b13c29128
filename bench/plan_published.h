// `titan bench plan-published`: the cost model (titan/plan/cost_model.h)
// against published training figures — TorchTitan's H100 and H200 benchmark
// tables and the TorchTitan-on-TPU case studies — recorded with their sources
// in bench/published_figures.toml. Each row's layout is costed on the
// hardware it ran on; the table prints published beside predicted tokens/s
// per device, memory and MFU with their ratios (docs/planning.md).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "titan/plan/device_profile.h"
#include "titan/plan/layout.h"

namespace titan::bench {

// A machine a source ran on: titan's published profile `device` with the
// figures where the machine differs from that profile's specification (0:
// keep the profile's).
struct PublishedHardware {
  std::string name, device, source;
  // memory_gb (decimal, as GPU datasheets write it) or memory_gib (binary, as TPU docs do).
  double memory_gb = 0.0, memory_gib = 0.0, memory_gbps = 0.0, inter_node_gbits = 0.0;
  double bf16_tflops = 0.0, fp8_tflops = 0.0;
  int64_t power_watts = 0;
  bool chip_stated = true;
};

// One published figure set and the job that produced it.
struct PublishedRow {
  std::string id, source, section, hardware;
  bool verified = true;  // false: no primary source was found (see the TOML)
  plan::PlanRequest request;
  plan::Layout layout;  // unused when `search`
  bool search = false;  // the source states no layout: cost titan's best one
  bool async_tp = false;
  int64_t local_batch = 0, global_batch = 0, microbatches = 0;  // sequences; microbatches: pipeline only
  double published_tps_per_device = 0.0;                        // 0: not published
  double published_memory_gib = 0.0;                            // 0: not published
  double published_mfu = 0.0;                                   // 0: not published
  std::vector<std::string> assumed;
};

struct PublishedFigures {
  std::map<std::string, PublishedHardware> hardware;
  std::vector<PublishedRow> rows;
};

// bench/published_figures.toml of this source tree.
std::string published_figures_default_path();
// Reads and checks the file: every row names a source and known hardware,
// its degrees multiply to its devices, its batches divide. Errors name the
// file and the row.
PublishedFigures load_published_figures(const std::string& path);
// The row's hardware as a device profile: the published profile with the
// row's machine's overrides.
plan::DeviceProfile published_row_device(const PublishedFigures& figures, const PublishedRow& row);

// The same job: degrees, batch, checkpointing and (under a pipeline) schedule,
// stages and micro-batch size. Fields a layout leaves open (micro-batching
// without a pipeline) do not count.
bool same_published_layout(const plan::Layout& a, const plan::Layout& b);

struct PlanPublishedOptions {
  std::string figures_path;      // empty: published_figures_default_path()
  std::vector<std::string> ids;  // rows to cost (empty: all)
  bool quick = false;            // skip the rows that search for a layout
  std::string json_path;
};

int run_plan_published_bench(const PlanPublishedOptions& options);

}  // namespace titan::bench
