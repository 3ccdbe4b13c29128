// A folder written under a temporary name beside its target
// (`<target>.partial`) and published under the target's name in one step, so
// a reader never sees a half-written folder and a command killed at any
// moment leaves the old one whole. What a command abandons goes with it: the
// staging folder is removed when the command fails (destroyed unpublished)
// and when SIGTERM or SIGINT ends the process (the signal thread calls
// remove_abandoned_staging_folders(), train/preemption.h).
#pragma once

#include <filesystem>

namespace titan {

class StagingFolder {
 public:
  // Creates `<target>.partial` (removing one an earlier killed run left).
  explicit StagingFolder(const std::filesystem::path& target);
  ~StagingFolder();
  StagingFolder(const StagingFolder&) = delete;
  StagingFolder& operator=(const StagingFolder&) = delete;

  const std::filesystem::path& path() const { return staging_; }
  // The staging folder of `target` (what path() is once constructed): for
  // processes that write into a folder another one made.
  static std::filesystem::path path_for(const std::filesystem::path& target);
  const std::filesystem::path& target() const { return target_; }

  // The staging folder takes the target's name: a rename, or over an existing
  // target an atomic exchange of the two folders (the old one then goes). On a
  // file system without RENAME_EXCHANGE the old one is moved aside first (a
  // kill between the two renames leaves it under `<target>.old`).
  void publish();

 private:
  std::filesystem::path target_, staging_;
  bool published_ = false;
};

// Removes every staging folder not yet published (best effort): the process is
// being ended by a signal. From then on no staging folder is created or
// published (either is an error), and writers cannot bring a removed one back
// (they never create it). Called from a normal thread, never a signal handler.
void remove_abandoned_staging_folders();

}  // namespace titan
