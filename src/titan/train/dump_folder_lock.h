// One job per dump folder: the job takes an exclusive advisory lock (flock)
// on <dump_folder>/.titan.lock, writes its host, pid and start time into it,
// and keeps it until it exits. A second job on the same folder is refused
// with a message naming the holder. The kernel drops a flock when its holder
// dies however it dies, so a lock left by a killed job is never in the way:
// the file's old contents only let the next job say whose lock it took over.
#pragma once

#include <string>

namespace titan::train {

class DumpFolderLock {
 public:
  // Creates the folder if needed; a titan::Error if another live job holds it.
  explicit DumpFolderLock(const std::string& dump_folder);
  ~DumpFolderLock();
  DumpFolderLock(const DumpFolderLock&) = delete;
  DumpFolderLock& operator=(const DumpFolderLock&) = delete;

  static constexpr const char* kFileName = ".titan.lock";
  // "pid 1234 on host h, since 2026-12-01 10:00:00", or "" when none was written.
  const std::string& previous_holder() const { return previous_holder_; }

 private:
  int fd_ = -1;
  std::string previous_holder_;
};

}  // namespace titan::train
