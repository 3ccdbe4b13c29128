#include "titan/core/staging_folder.h"

#include <fcntl.h>
#include <stdio.h>

#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "titan/core/error.h"

namespace titan {

namespace fs = std::filesystem;

namespace {

std::mutex g_mutex;
// Set by the signal's cleanup: the process is ending, and no staging folder
// may be created or published after it.
bool g_ending = false;
std::set<std::string>& live_staging_folders() {
  static std::set<std::string> folders;
  return folders;
}

// A writer may still be creating files in the folder while it is removed
// (its rmdir then fails with ENOTEMPTY): try again until it is gone. Writers
// never create the staging folder itself (only StagingFolder does, under the
// lock), so once it is gone it stays gone.
void remove_quietly(const fs::path& folder) {
  for (int attempt = 0; attempt < 200; ++attempt) {
    std::error_code error;
    fs::remove_all(folder, error);
    if (!error && !fs::exists(folder, error)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace

namespace {

fs::path normal_target(const fs::path& target) {
  fs::path normal = fs::absolute(target).lexically_normal();
  if (!normal.has_filename()) normal = normal.parent_path();  // "out/" is the folder "out"
  TITAN_CHECK(!normal.empty() && normal != normal.root_path(), "'{}' does not name a folder", target.string());
  return normal;
}

}  // namespace

fs::path StagingFolder::path_for(const fs::path& target) {
  const fs::path normal = normal_target(target);
  return normal.parent_path() / (normal.filename().string() + ".partial");
}

StagingFolder::StagingFolder(const fs::path& target) {
  target_ = normal_target(target);
  staging_ = path_for(target_);
  // Under the lock, so that a signal's cleanup sees either no folder or a
  // registered one, never one being created.
  std::lock_guard<std::mutex> lock(g_mutex);
  TITAN_CHECK(!g_ending, "not writing {}: the process is ending on a signal", target_.string());
  fs::create_directories(target_.parent_path());
  fs::remove_all(staging_);
  fs::create_directory(staging_);
  live_staging_folders().insert(staging_.string());
}

StagingFolder::~StagingFolder() {
  std::lock_guard<std::mutex> lock(g_mutex);
  live_staging_folders().erase(staging_.string());
  if (!published_) remove_quietly(staging_);
}

void StagingFolder::publish() {
  // Under the lock: a signal's cleanup either comes first (the old target
  // stays) or finds the folder published.
  std::lock_guard<std::mutex> lock(g_mutex);
  TITAN_CHECK(!g_ending, "not publishing {}: the process is ending on a signal", target_.string());
  std::error_code error;
  if (!fs::exists(target_, error)) {
    fs::rename(staging_, target_);
  } else if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, target_.c_str(), RENAME_EXCHANGE) == 0) {
    remove_quietly(staging_);  // now the old folder
  } else {
    const fs::path aside = target_.parent_path() / (target_.filename().string() + ".old");
    fs::remove_all(aside);
    fs::rename(target_, aside);
    fs::rename(staging_, target_);
    fs::remove_all(aside);
  }
  published_ = true;
  live_staging_folders().erase(staging_.string());
}

void remove_abandoned_staging_folders() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_ending = true;
  for (const std::string& folder : live_staging_folders()) remove_quietly(folder);
}

}  // namespace titan
