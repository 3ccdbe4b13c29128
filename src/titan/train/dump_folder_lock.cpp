#include "titan/train/dump_folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>

#include "titan/core/error.h"

namespace titan::train {
namespace {

std::string read_all(int fd) {
  std::string text;
  char buffer[512];
  ssize_t got;
  ::lseek(fd, 0, SEEK_SET);
  while ((got = ::read(fd, buffer, sizeof(buffer))) > 0 || (got < 0 && errno == EINTR)) {
    if (got > 0) text.append(buffer, static_cast<size_t>(got));
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

std::string this_holder() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  const std::time_t now = std::time(nullptr);
  char when[64] = {};
  std::strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", std::localtime(&now));
  return fmt::format("pid {} on host {}, since {}", ::getpid(), host, when);
}

}  // namespace

DumpFolderLock::DumpFolderLock(const std::string& dump_folder) {
  const std::filesystem::path folder(dump_folder);
  std::error_code error;
  std::filesystem::create_directories(folder, error);
  TITAN_CHECK(!error, "job.dump_folder '{}': cannot create it: {}", dump_folder, error.message());
  const std::string path = (folder / kFileName).string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  TITAN_CHECK(fd_ >= 0, "job.dump_folder '{}': cannot create its lock file {}: {}", dump_folder, path,
              std::strerror(errno));
  int locked;
  while ((locked = ::flock(fd_, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {
  }
  if (locked != 0) {
    const int lock_errno = errno;
    const std::string holder = read_all(fd_);
    ::close(fd_);
    fd_ = -1;
    TITAN_CHECK(lock_errno != EWOULDBLOCK,
                "job.dump_folder '{}' is in use by another titan job ({}); two jobs on "
                "one folder would overwrite each other's checkpoints and metrics: wait for it, stop it, or give "
                "this job its own --job.dump_folder",
                dump_folder, holder.empty() ? "holder unknown" : holder);
    fail("job.dump_folder '{}': cannot lock {}: {}", dump_folder, path, std::strerror(lock_errno));
  }
  previous_holder_ = read_all(fd_);
  const std::string holder = this_holder() + "\n";
  const bool written =
      ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, holder.data(), holder.size(), 0) == static_cast<ssize_t>(holder.size());
  TITAN_CHECK(written, "job.dump_folder '{}': cannot write its lock file {}: {}", dump_folder, path,
              std::strerror(errno));
}

DumpFolderLock::~DumpFolderLock() {
  if (fd_ < 0) return;
  // Emptied rather than removed: removing it could race with a job that has
  // opened the file and is about to lock it (it would then lock a file that no
  // longer has a name, while a third job creates and locks a new one).
  [[maybe_unused]] const int emptied = ::ftruncate(fd_, 0);  // nothing to do if it fails: the lock goes anyway
  ::close(fd_);
}

}  // namespace titan::train
