// The folders of a job's checkpoints: `step-000100/` per step, written as
// `step-000100.partial/` and renamed once every file in it is fsynced and the
// completion marker (written last) is in place. A folder without the marker
// is never loaded.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace titan::checkpoint {

inline constexpr const char* kCompleteMarker = "COMPLETE";
inline constexpr const char* kMetadataFile = "metadata.json";

std::string step_folder_name(int64_t step);     // "step-000100"
std::string staging_folder_name(int64_t step);  // "step-000100.partial"
// The step a folder's name says ("step-000100" -> 100); nullopt for any other name.
std::optional<int64_t> step_of_folder_name(const std::string& name);

struct CheckpointScan {
  std::vector<int64_t> complete;        // steps with the marker, ascending
  std::vector<std::string> incomplete;  // folders that look like checkpoints but lack it (paths)
};
// Looks through `root` (missing: nothing found). Step folders holding only a
// model export (no metadata.json, no marker) are neither.
CheckpointScan scan_checkpoints(const std::string& root);

// Whether `folder` is a complete checkpoint (has the marker).
bool is_complete_checkpoint(const std::string& folder);

// fsyncs a file or a folder (so a rename or a new file in it is durable).
void fsync_path(const std::string& path);
// Writes `text` to `path` and fsyncs it.
void write_file_durably(const std::string& path, const std::string& text);
// Marks `staging` complete (marker written and fsynced last), renames it to
// `target` (replacing an older folder of that name) and fsyncs the parent.
void publish_checkpoint(const std::string& staging, const std::string& target);
// Removes all but the newest `keep` complete checkpoints under `root` (keep <= 0: none removed).
void remove_old_checkpoints(const std::string& root, int64_t keep);

}  // namespace titan::checkpoint
