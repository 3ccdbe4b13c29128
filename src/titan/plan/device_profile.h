// The hardware a plan is costed on (docs/planning.md): peak dense throughput
// by dtype, memory size and bandwidth, how GEMM efficiency falls with shape,
// and the two link classes, within a node and across nodes. The GPU and TPU
// profiles come from published specifications (each names its source); `cpu`
// is measured on the spot on this machine (measure_cpu_profile).
#pragma once

#include <string>
#include <vector>

#include "titan/core/dtype.h"

namespace titan::plan {

// A link class's cost model: a message of b bytes takes latency + b / bytes_per_second.
struct LinkProfile {
  double latency_seconds = 0.0;
  // Per device, one direction: what a ring step between two devices of this class moves per second.
  double bytes_per_second = 0.0;
  // Messages up to cached_bytes move at cached_bytes_per_second instead (0:
  // no such regime). CPU ranks move messages by memory copies, several times
  // faster while the buffers stay in the last-level cache than from DRAM.
  double cached_bytes = 0.0;
  double cached_bytes_per_second = 0.0;

  // latency + bytes over the bandwidth of the message's regime.
  double message_seconds(double bytes) const;
};

struct DeviceProfile {
  std::string name;         // h100, h200, b200, a100, mi300x, tpu_v5p, tpu_v6e, cpu
  std::string description;  // "NVIDIA H100 SXM5 80 GB"
  std::string source;       // where the figures come from (a URL or "measured on this machine")
  double bf16_flops = 0.0;  // dense peak, FLOP/s
  double fp8_flops = 0.0;   // 0: no fp8 units
  double f32_flops = 0.0;   // GPUs: tf32 tensor cores
  double memory_bytes = 0.0;
  double memory_bytes_per_second = 0.0;
  int devices_per_node = 8;  // default for --devices-per-node
  LinkProfile intra_node, inter_node;
  // GEMM [m, k] x [k, n] reaches peak x gemm_max_efficiency x f(m) f(n) f(k),
  // f(d) = d / (d + gemm_half_dim): large products approach the maximum, thin
  // ones (a small batch, a narrow tensor-parallel shard) fall away from it.
  double gemm_max_efficiency = 0.75;
  double gemm_half_dim = 64.0;
  double attention_efficiency = 0.5;  // of peak, for the attention kernel's FLOPs
  // > 0: the attention kernel's efficiency also scales by f(head_dim) (the f
  // above with this half dimension): its inner products reduce over the head
  // dimension, which a CPU kernel's tiles feel (measured for `cpu`); 0 for
  // the published profiles, whose figures are for the usual 64-128.
  double attention_half_dim = 0.0;
  double memory_efficiency = 0.8;  // of memory bandwidth, for elementwise and norm kernels
  // Host cost per kernel an op launches. Accelerators queue kernels ahead of
  // the device, so it is hidden unless it exceeds the kernel itself; the CPU
  // pays it in line.
  double op_overhead_seconds = 0.0;
  bool overhead_in_line = false;
  // Host cost of issuing one collective, beyond its messages: the CPU's mpi
  // group hands each call to its worker thread and wakes the caller when done
  // (measured); accelerators queue the launch ahead like any kernel's (0).
  double collective_overhead_seconds = 0.0;
  // CPU ranks that fill every core: what a collective issued while compute
  // goes on (FSDP's prefetch and reduce-scatter) costs per call instead, its
  // worker and its peers' waiting for the scheduler (measured by the link
  // probe). 0: no such contention (accelerators, or cores to spare).
  double contended_collective_seconds = 0.0;
  // CPU: the cores the node's ranks share (a rank's threads beyond its share
  // time-slice); 0 for accelerators.
  int cores = 0;
  int threads_per_rank = 0;  // CPU: OpenMP threads each rank runs

  double peak_flops(DType dtype) const;
};

// The published profile of `name` (a name of device_profile_names() but
// "cpu"); an unknown name is an error listing the known ones.
const DeviceProfile& published_device_profile(const std::string& name);
// Every name --device-type takes, "cpu" last.
std::vector<std::string> device_profile_names();

struct CpuProbeOptions {
  int ranks_per_node = 1;    // ranks that will share this machine's cores
  int threads_per_rank = 0;  // 0: the cores divided among the ranks (at least 1)
  // Measure the links with an mpirun of two ranks of this executable
  // (`titan plan --probe-links`); off: the MPI shared-memory defaults measured
  // when the profile was written (docs/planning.md), said in `source`.
  bool measure_links = true;
  std::string titan_executable;  // the executable to run the link probe with
};
// This machine as a device: GEMM throughput (a large product) and the
// efficiency curve fitted to smaller ones, memory bandwidth (a streaming
// copy), per-op overhead (a tiny op) and, with measure_links, the latency and
// bandwidth between two MPI ranks.
DeviceProfile measure_cpu_profile(const CpuProbeOptions& options);

// The seconds one GEMM [m, k] x [k, n] takes on `device` in `dtype` (FLOPs
// against the shape's efficiency, or its operands' bytes against memory
// bandwidth when that takes longer).
double gemm_seconds(const DeviceProfile& device, double m, double n, double k, DType dtype);

// Bytes per second titan's elementwise kernels read plus write over `tokens`
// rows of width `width` and FFN width `hidden` (bf16): RMSNorm forward and
// backward, a residual add, SwiGLU forward and backward, a cast to f32 and
// back, a block's mix. They run below a streaming copy's rate (arithmetic
// per element, rows of a few hundred, f32 accumulation). The cpu profile
// takes it on a debug block's shapes as its memory_efficiency.
double elementwise_mix_rate(int64_t tokens, int64_t width, int64_t hidden);

// The attention kernel's efficiency (of peak) on `device` for heads of `head_dim`.
double attention_efficiency(const DeviceProfile& device, double head_dim);

}  // namespace titan::plan
