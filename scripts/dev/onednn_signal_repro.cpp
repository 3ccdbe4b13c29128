// The root cause behind train/preemption.h, without titan: oneDNN 2.6's JIT
// f32 GEMM corrupts the heap when a signal handler (here one that only counts)
// runs on one of its threads in the middle of a kernel.
//
//   g++ -O2 -fopenmp scripts/dev/onednn_signal_repro.cpp -o /tmp/repro -ldnnl
//   /tmp/repro 256 0   # no signals: 3000 products, bitwise equal to the first
//   /tmp/repro 256 1   # SIGUSR1 to every OpenMP thread every 20 us: "corrupted
//                      # size vs. prev_size" within seconds (AVX2 and AVX-512
//                      # kernels; ONEDNN_MAX_CPU_ISA=SSE41 survives)
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {
volatile sig_atomic_t g_signals = 0;
void count_signal(int) { g_signals = g_signals + 1; }
}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 256;
  const bool storm = argc > 2 && std::atoi(argv[2]) != 0;
  struct sigaction action {};
  action.sa_handler = count_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR1, &action, nullptr);
  std::vector<float> a(n * n), b(n * n), first(n * n), c(n * n);
  for (int i = 0; i < n * n; ++i) {
    a[i] = static_cast<float>(i % 17) * 0.25f - 2;
    b[i] = static_cast<float>(i % 13) * 0.5f - 3;
  }
  dnnl_sgemm('N', 'T', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, first.data(), n);
  std::vector<pid_t> threads(omp_get_max_threads());
#pragma omp parallel
  threads[omp_get_thread_num()] = static_cast<pid_t>(syscall(SYS_gettid));
  std::atomic<bool> done{false};
  std::thread sender([&] {
    while (!done) {
      if (storm) {
        for (pid_t thread : threads) syscall(SYS_tgkill, getpid(), thread, SIGUSR1);
      }
      usleep(20);
    }
  });
  int mismatches = 0;
  for (int i = 0; i < 3000; ++i) {
    dnnl_sgemm('N', 'T', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
    mismatches += std::memcmp(c.data(), first.data(), sizeof(float) * n * n) != 0;
  }
  done = true;
  sender.join();
  std::printf("n=%d signals=%d mismatches=%d\n", n, static_cast<int>(g_signals), mismatches);
  return mismatches != 0;
}
