#include "titan/train/goodput.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

namespace titan::train {

double Goodput::total_seconds() const {
  return startup_seconds + productive_seconds + data_wait_seconds + checkpoint_seconds + validation_seconds +
         lost_seconds + skipped_seconds + other_seconds + fast_tier_seconds + replica_seconds;
}

double Goodput::percent() const {
  const double total = total_seconds();
  return total > 0 ? 100.0 * productive_seconds / total : 0.0;
}

nlohmann::json Goodput::to_json() const {
  nlohmann::json record{{"goodput_percent", percent()},
                        {"wall_seconds", total_seconds()},
                        {"productive_seconds", productive_seconds},
                        {"startup_seconds", startup_seconds},
                        {"checkpoint_seconds", checkpoint_seconds},
                        {"data_wait_seconds", data_wait_seconds},
                        {"validation_seconds", validation_seconds},
                        {"lost_to_restart_seconds", lost_seconds},
                        {"lost_to_restart_steps", lost_steps},
                        {"skipped_nonfinite_seconds", skipped_seconds},
                        {"skipped_nonfinite_steps", skipped_steps},
                        {"other_seconds", other_seconds},
                        {"fast_tier_seconds", fast_tier_seconds},
                        {"replica_seconds", replica_seconds},
                        {"restart_tier", restart_tier},
                        {"recover_seconds", recover_seconds}};
  if (fault_tolerance) {
    record["ft_steps_recovered"] = ft_steps_recovered;
    record["ft_recover_seconds"] = ft_recover_seconds;
    record["ft_retries"] = ft_retries;
    record["ft_min_replicas_live"] = ft_min_replicas_live;
  }
  return record;
}

std::string Goodput::summary_line() const {
  const double total = total_seconds();
  const auto share = [&](double seconds) { return total > 0 ? 100.0 * seconds / total : 0.0; };
  // The tiers' part only where the job has them, so the line of a job without stays as it was.
  std::string tiers;
  if (fast_tier_seconds > 0 || replica_seconds > 0) {
    tiers += fmt::format(", fast tier {:.2f} s ({:.1f}%), replica {:.2f} s ({:.1f}%)", fast_tier_seconds,
                         share(fast_tier_seconds), replica_seconds, share(replica_seconds));
  }
  if (!restart_tier.empty())
    tiers += fmt::format(", resumed from the {} tier in {:.2f} s", restart_tier, recover_seconds);
  return fmt::format(
             "titan: goodput {:.1f}% of {:.2f} s: productive {:.2f} s, start-up {:.2f} s ({:.1f}%), checkpoints "
             "{:.2f} s ({:.1f}%), data waits {:.2f} s ({:.1f}%), validation {:.2f} s ({:.1f}%), lost to restart "
             "{:.2f} s ({} steps), skipped non-finite {:.2f} s ({} steps), other {:.2f} s ({:.1f}%)",
             percent(), total, productive_seconds, startup_seconds, share(startup_seconds), checkpoint_seconds,
             share(checkpoint_seconds), data_wait_seconds, share(data_wait_seconds), validation_seconds,
             share(validation_seconds), lost_seconds, lost_steps, skipped_seconds, skipped_steps, other_seconds,
             share(other_seconds)) +
         tiers;
}

int64_t last_logged_step(const std::string& metrics_jsonl) {
  // Only a regular file holds earlier records: a device in its place (/dev/full, /dev/zero)
  // reads as an endless line of NUL bytes, which getline would hold in memory forever.
  std::error_code error;
  if (!std::filesystem::is_regular_file(metrics_jsonl, error)) return 0;
  std::ifstream in(metrics_jsonl);
  int64_t last = 0;
  std::string line;
  while (std::getline(in, line)) {
    // A record cut short by a crash, or one without a step, tells nothing.
    const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_object() && record.contains("step") && record["step"].is_number_integer()) {
      last = std::max(last, record["step"].get<int64_t>());
    }
  }
  return last;
}

}  // namespace titan::train
