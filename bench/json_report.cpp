#include "bench/json_report.h"

#include "titan/checkpoint/checkpoint_folder.h"

namespace titan::bench {

void write_json_report(const std::string& path, const nlohmann::json& results) {
  if (path.empty()) return;
  checkpoint::write_file_durably(path, results.dump(2) + "\n");
}

}  // namespace titan::bench
