#include "titan/train/rehearsal_report.h"

#include <algorithm>
#include <fstream>
#include <sstream>

#include "titan/comm/fake_process_group.h"
#include "titan/core/units.h"

namespace titan::train {

double peak_resident_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return 1024.0 * std::stod(line.substr(6));  // "VmHWM:   123456 kB"
  }
  return 0.0;
}

namespace {

const comm::FakeProcessGroup* fake_world(const comm::DeviceMesh& mesh) {
  return dynamic_cast<const comm::FakeProcessGroup*>(mesh.group(comm::MeshDim::world).get());
}

}  // namespace

void forget_setup_collectives(const comm::DeviceMesh& mesh) {
  if (const comm::FakeProcessGroup* world = fake_world(mesh)) world->ledger()->clear();
}

std::string rehearsal_report(const JobConfig& config, const comm::DeviceMesh& mesh,
                             const std::vector<StepMetrics>& history, double estimated_bytes) {
  std::ostringstream out;
  const comm::ParallelDims& d = mesh.dims();
  out << fmt::format(
      "titan: rehearsal (comm.mode = fake_backend): rank {} of {} (pp {} x dp_replicate {} x dp_shard {} x cp {} x tp "
      "{}, ep {})\n",
      config.comm.fake_rank, config.comm.fake_world_size, d.pp, d.dp_replicate, d.dp_shard, d.cp, d.tp, d.ep);
  double peak_gib = 0.0;
  std::vector<double> step_seconds;
  for (const StepMetrics& m : history) {
    peak_gib = std::max(peak_gib, m.peak_memory_gib);
    step_seconds.push_back(m.step_seconds);
  }
  const double resident = peak_resident_bytes();
  out << fmt::format(
      "titan: rehearsal: peak memory {:.3f} GiB in tensors, {:.3f} GiB resident (VmHWM); the memory check "
      "estimated {:.3f} GiB per rank\n",
      peak_gib, resident / kBytesPerGiB, estimated_bytes / kBytesPerGiB);
  if (!step_seconds.empty()) {
    std::sort(step_seconds.begin(), step_seconds.end());
    out << fmt::format(
        "titan: rehearsal: {} steps, median {:.3f} s each, all of it compute (the fake collectives return at once; "
        "a real job adds whatever communication it cannot overlap)\n",
        step_seconds.size(), step_seconds[step_seconds.size() / 2]);
  }
  const comm::FakeProcessGroup* world = fake_world(mesh);
  if (world == nullptr) return out.str();
  const double steps = static_cast<double>(std::max<size_t>(1, history.size()));
  out << "titan: rehearsal: collectives this rank issues per step (group, operation: calls, bytes)\n";
  for (const auto& [key, tally] : world->ledger()->tallies()) {
    out << fmt::format("titan:   {:<20} {:<15} {:>10.1f} calls {:>12.2f} MiB\n", key.first, key.second,
                       static_cast<double>(tally.calls) / steps, static_cast<double>(tally.bytes) / steps / 1048576.0);
  }
  return out.str();
}

}  // namespace titan::train
