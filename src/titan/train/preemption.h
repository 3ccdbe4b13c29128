// SIGTERM / SIGINT as a request to stop cleanly: the trainer finishes its
// step, all ranks agree (a max all-reduce of the flag each step), save a
// checkpoint and exit 0.
//
// The signals never interrupt a thread that computes. A handler runs on
// whichever thread the kernel picks, wherever it is, and oneDNN 2.6's JIT
// f32 GEMM (its AVX2 and AVX-512 kernels) does not survive that: a no-op
// handler running on one of its threads mid-kernel corrupts the heap
// ("corrupted size vs. prev_size", "free(): invalid pointer" a few steps
// later; scripts/dev/onednn_signal_repro.cpp shows it without titan, and
// tests/signals/signal_test.cpp through titan). So SIGTERM and SIGINT are
// blocked in every thread and received by one thread that does nothing else
// (sigwait); the flag it sets is process-wide state because the signal is.
#pragma once

namespace titan::train {

// Blocks SIGTERM, SIGINT and SIGUSR1 in the calling thread, and so in every
// thread it starts afterwards, and starts the thread that receives them.
// main() calls it first, before any other thread exists. Idempotent. Until a
// PreemptionWatcher is created, SIGTERM or SIGINT ends the process as by
// default; once one has received a signal, later ones are absorbed until the
// process exits. SIGUSR1 never stops anything: it writes the flight
// recorder's dump (comm/flight_recorder.h) and the job runs on.
void install_signal_thread();

class PreemptionWatcher {
 public:
  // Installs the signal thread if main() did not, and starts watching.
  PreemptionWatcher();
  ~PreemptionWatcher();
  PreemptionWatcher(const PreemptionWatcher&) = delete;
  PreemptionWatcher& operator=(const PreemptionWatcher&) = delete;

  // Whether a signal arrived; also true when the test hook
  // TITAN_TEST_SIGTERM_AT_STEP=N (on rank TITAN_TEST_SIGTERM_RANK, default 0)
  // sent a real SIGTERM (to the signal thread) after step N.
  bool requested(long long step, int rank) const;
  // The signal received while watching (0: none).
  static int signal_received();
};

}  // namespace titan::train
