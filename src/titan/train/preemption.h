// SIGTERM / SIGINT as a request to stop cleanly: the handler only sets a
// flag; the trainer finishes its step, all ranks agree (a max all-reduce of
// the flag each step), save a checkpoint and exit 0. The flag is process-wide
// state because a signal handler can reach nothing else.
#pragma once

namespace titan::train {

class PreemptionWatcher {
 public:
  // Installs the handlers (restored by the destructor).
  PreemptionWatcher();
  ~PreemptionWatcher();
  PreemptionWatcher(const PreemptionWatcher&) = delete;
  PreemptionWatcher& operator=(const PreemptionWatcher&) = delete;

  // Whether a signal arrived; also true when the test hook
  // TITAN_TEST_SIGTERM_AT_STEP=N (on rank TITAN_TEST_SIGTERM_RANK, default 0)
  // raised a real SIGTERM after step N.
  bool requested(long long step, int rank) const;
  static int signal_received();
};

}  // namespace titan::train
