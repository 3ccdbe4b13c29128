#include "titan/train/preemption.h"

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "titan/comm/flight_recorder.h"
#include "titan/core/error.h"
#include "titan/core/staging_folder.h"

namespace titan::train {
namespace {

std::atomic<int> g_signal{0};
std::atomic<bool> g_watching{false};
std::once_flag g_install_once;
pthread_t g_signal_thread;

// Every signal the signal thread receives: the stop requests, and SIGUSR1
// (write the flight recorder's dump and keep running).
sigset_t handled_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGUSR1);
  return set;
}

[[noreturn]] void receive_signals() {
  const sigset_t set = handled_signals();
  for (;;) {
    int signal = 0;
    if (sigwait(&set, &signal) != 0) continue;
    if (signal == SIGUSR1) {
      // Here, not in a handler: the dump allocates and writes files.
      if (comm::FlightRecorder::instance().dump("SIGUSR1").empty()) {
        std::fprintf(stderr, "titan: SIGUSR1: no flight recorder dump (comm.trace_buf_size is 0, or see above)\n");
        std::fflush(stderr);
      }
      continue;
    }
    if (g_watching.load()) {
      int none = 0;
      g_signal.compare_exchange_strong(none, signal);
      continue;
    }
    // No job to stop cleanly: the signal does what it does by default, which
    // ends the process (only this thread accepts it once unblocked), after
    // removing the staging folders the command would abandon.
    remove_abandoned_staging_folders();
    std::signal(signal, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signal);
    pthread_sigmask(SIG_UNBLOCK, &one, nullptr);
    pthread_kill(pthread_self(), signal);
  }
}

}  // namespace

void install_signal_thread() {
  std::call_once(g_install_once, [] {
    const sigset_t set = handled_signals();
    TITAN_CHECK(pthread_sigmask(SIG_BLOCK, &set, nullptr) == 0, "cannot block SIGTERM, SIGINT and SIGUSR1");
    std::thread receiver(receive_signals);
    g_signal_thread = receiver.native_handle();
    receiver.detach();  // blocked in sigwait for the rest of the process
  });
}

PreemptionWatcher::PreemptionWatcher() {
  install_signal_thread();
  g_signal = 0;
  g_watching = true;
}

// After a stop request, later signals stay stop requests (absorbed) until the
// process exits: a second SIGTERM during the final save must not kill it.
PreemptionWatcher::~PreemptionWatcher() {
  if (g_signal.load() == 0) g_watching = false;
}

int PreemptionWatcher::signal_received() { return g_signal.load(); }

bool PreemptionWatcher::requested(long long step, int rank) const {
  if (const char* at = std::getenv("TITAN_TEST_SIGTERM_AT_STEP"); at != nullptr && std::stoll(at) == step) {
    const char* on = std::getenv("TITAN_TEST_SIGTERM_RANK");
    if ((on == nullptr ? 0 : std::stoi(on)) == rank) {
      // Through the real path: a SIGTERM the signal thread receives. It arrives
      // asynchronously, so wait (briefly) until it has been taken.
      pthread_kill(g_signal_thread, SIGTERM);
      for (int i = 0; i < 5000 && g_signal.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  return g_signal.load() != 0;
}

}  // namespace titan::train
