#include "titan/train/preemption.h"

#include <csignal>
#include <cstdlib>
#include <string>

namespace titan::train {
namespace {

volatile std::sig_atomic_t g_signal = 0;
struct sigaction g_previous_term {
}, g_previous_int{};

void on_signal(int signal) { g_signal = signal; }

}  // namespace

PreemptionWatcher::PreemptionWatcher() {
  g_signal = 0;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, &g_previous_term);
  sigaction(SIGINT, &action, &g_previous_int);
}

PreemptionWatcher::~PreemptionWatcher() {
  sigaction(SIGTERM, &g_previous_term, nullptr);
  sigaction(SIGINT, &g_previous_int, nullptr);
}

int PreemptionWatcher::signal_received() { return g_signal; }

bool PreemptionWatcher::requested(long long step, int rank) const {
  if (const char* at = std::getenv("TITAN_TEST_SIGTERM_AT_STEP"); at != nullptr && std::stoll(at) == step) {
    const char* on = std::getenv("TITAN_TEST_SIGTERM_RANK");
    if ((on == nullptr ? 0 : std::stoi(on)) == rank) std::raise(SIGTERM);
  }
  return g_signal != 0;
}

}  // namespace titan::train
