#include "bench/busy_cores.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "titan/core/error.h"

namespace titan::bench {

BusyCores::BusyCores(int count) {
  for (int i = 0; i < count; ++i) {
    const pid_t pid = ::fork();
    TITAN_CHECK(pid >= 0, "bench: cannot start a busy process");
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the benchmark
      volatile unsigned long spin = 0;
      for (;;) spin = spin + 1;
    }
    children_.push_back(pid);
  }
  // Let the scheduler place them before anything is timed.
  if (count > 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
}

BusyCores::~BusyCores() {
  for (pid_t pid : children_) ::kill(pid, SIGKILL);
  for (pid_t pid : children_) ::waitpid(pid, nullptr, 0);
}

}  // namespace titan::bench
