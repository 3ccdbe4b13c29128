#include "titan/checkpoint/checkpoint_folder.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <regex>

#include "titan/core/error.h"

namespace titan::checkpoint {

namespace fs = std::filesystem;

std::string step_folder_name(int64_t step) { return fmt::format("step-{:06}", step); }
std::string staging_folder_name(int64_t step) { return step_folder_name(step) + ".partial"; }

std::optional<int64_t> step_of_folder_name(const std::string& name) {
  static const std::regex step_name(R"(step-([0-9]{1,18}))");
  std::smatch match;
  if (!std::regex_match(name, match, step_name)) return std::nullopt;
  return std::stoll(match[1]);
}

bool is_complete_checkpoint(const std::string& folder) {
  return fs::is_regular_file(fs::path(folder) / kCompleteMarker);
}

CheckpointScan scan_checkpoints(const std::string& root) {
  CheckpointScan scan;
  if (!fs::is_directory(root)) return scan;
  static const std::regex step_name(R"(step-([0-9]+)(\.partial)?)");
  for (const auto& entry : fs::directory_iterator(root)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (!entry.is_directory() || !std::regex_match(name, match, step_name)) continue;
    const bool partial = match[2].matched;
    if (!partial && is_complete_checkpoint(entry.path().string())) {
      scan.complete.push_back(std::stoll(match[1]));
    } else if (partial || fs::exists(entry.path() / kMetadataFile)) {
      scan.incomplete.push_back(entry.path().string());
    }
  }
  std::sort(scan.complete.begin(), scan.complete.end());
  std::sort(scan.incomplete.begin(), scan.incomplete.end());
  return scan;
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TITAN_CHECK(fd >= 0, "cannot open '{}' to fsync it: {}", path, std::strerror(errno));
  const int status = ::fsync(fd);
  ::close(fd);
  TITAN_CHECK(status == 0, "fsync '{}' failed: {}", path, std::strerror(errno));
}

void write_file_durably(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  TITAN_CHECK(fd >= 0, "cannot create '{}': {}", path, std::strerror(errno));
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      ::close(fd);
      fail("writing '{}' failed: {}", path, std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  const int status = ::fsync(fd);
  ::close(fd);
  TITAN_CHECK(status == 0, "fsync '{}' failed: {}", path, std::strerror(errno));
}

void publish_checkpoint(const std::string& staging, const std::string& target) {
  // Files written by other means (the model export) are fsynced here too; the
  // marker comes last, so a crash before it leaves a folder no loader accepts.
  for (const auto& entry : fs::directory_iterator(staging)) {
    if (entry.is_regular_file()) fsync_path(entry.path().string());
  }
  write_file_durably((fs::path(staging) / kCompleteMarker).string(), "complete\n");
  fsync_path(staging);
  if (fs::exists(target)) {
    // Re-saving a step (a resumed run reaching it again): the old folder goes only once the new one is in place.
    const std::string old = target + ".old";
    fs::remove_all(old);
    fs::rename(target, old);
    fs::rename(staging, target);
    fs::remove_all(old);
  } else {
    fs::rename(staging, target);
  }
  fsync_path(fs::path(target).parent_path().string());
}

void remove_old_checkpoints(const std::string& root, int64_t keep) {
  if (keep <= 0) return;
  const CheckpointScan scan = scan_checkpoints(root);
  const auto excess = static_cast<int64_t>(scan.complete.size()) - keep;
  for (int64_t i = 0; i < excess; ++i) {
    // The marker goes first: a removal cut short leaves a folder no loader accepts.
    const fs::path folder = fs::path(root) / step_folder_name(scan.complete[static_cast<size_t>(i)]);
    fs::remove(folder / kCompleteMarker);
    fs::remove_all(folder);
  }
}

}  // namespace titan::checkpoint
