#include "titan/plan/device_profile.h"

#include "titan/train/device_peak.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "titan/core/copy.h"
#include "titan/core/error.h"
#include "titan/core/generator.h"
#include "titan/ops/attention.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/gemm.h"
#include "titan/ops/random.h"
#include "titan/ops/rms_norm.h"
#include "titan/plan/link_probe.h"

namespace titan::plan {

double DeviceProfile::peak_flops(DType dtype) const {
  switch (dtype) {
    case DType::bf16:
    case DType::f16:
      return bf16_flops;
    case DType::f8e4m3:
    case DType::f8e5m2:
      // Without fp8 units an fp8 GEMM runs at the 16-bit rate (after an upcast).
      return fp8_flops > 0 ? fp8_flops : bf16_flops;
    case DType::f32:
      return f32_flops;
    default:
      fail("device profile {}: no GEMM throughput for {}", name, dtype_name(dtype));
  }
}

namespace {

constexpr double kGB = 1e9;
constexpr double kTFLOPS = 1e12;

// Latency assumptions (one message, one hop, as NCCL/RCCL/XLA pay it): a few
// microseconds on NVLink / Infinity Fabric / ICI, about 10 us over
// InfiniBand/RoCE through the NIC and one switch level (nccl-tests' small-message
// all-reduce times on such systems are tens of microseconds for a handful of steps).
constexpr double kNvlinkLatency = 3e-6;
constexpr double kNetworkLatency = 10e-6;
constexpr double kIciLatency = 2e-6;

// GPU kernel launch cost: ~5 us per kernel from the host; queued ahead of the
// device, so hidden unless the kernel is shorter.
constexpr double kGpuLaunchOverhead = 5e-6;

DeviceProfile published_h100() {
  DeviceProfile d;
  d.name = "h100";
  d.description = "NVIDIA H100 SXM5 80 GB";
  d.source = "https://www.nvidia.com/en-us/data-center/h100/ (H100 SXM datasheet; dense = half the sparse figures)";
  d.bf16_flops = 989.4 * kTFLOPS;
  d.fp8_flops = 1978.9 * kTFLOPS;
  d.f32_flops = 494.7 * kTFLOPS;  // tf32 tensor cores
  d.memory_bytes = 80 * kGB;      // published capacity (decimal GB): a little below what the device reports
  d.memory_bytes_per_second = 3350 * kGB;
  d.devices_per_node = 8;
  // NVLink 4: 900 GB/s bidirectional per GPU = 450 GB/s each way through NVSwitch.
  d.intra_node = {kNvlinkLatency, 450 * kGB};
  // One 400 Gb/s ConnectX-7 NIC per GPU (DGX/HGX H100): 50 GB/s each way.
  d.inter_node = {kNetworkLatency, 50 * kGB};
  // cuBLAS reaches ~700-800 of 989 TFLOP/s on large bf16 GEMMs (~0.75); tiles
  // of 128 x 128-256 leave thin shapes (d of a few hundred) well below it.
  d.gemm_max_efficiency = 0.75;
  d.gemm_half_dim = 64;
  // FlashAttention-2 / cuDNN SDPA run at ~40-60% of peak on H100 (FA2 paper, FA3 paper's baselines).
  d.attention_efficiency = 0.5;
  d.memory_efficiency = 0.8;  // elementwise kernels stream at ~80-90% of HBM bandwidth
  d.op_overhead_seconds = kGpuLaunchOverhead;
  d.overhead_in_line = false;
  return d;
}

DeviceProfile published_h200() {
  DeviceProfile d = published_h100();  // the same GH100 die and clocks: same compute, links
  d.name = "h200";
  d.description = "NVIDIA H200 SXM 141 GB";
  d.source = "https://www.nvidia.com/en-us/data-center/h200/ (H200 SXM datasheet; dense = half the sparse figures)";
  d.memory_bytes = 141 * kGB;
  d.memory_bytes_per_second = 4800 * kGB;
  // The extra bandwidth lets GEMMs run a little closer to peak (MLPerf H200 vs H100 at equal clocks).
  d.gemm_max_efficiency = 0.77;
  return d;
}

DeviceProfile published_b200() {
  DeviceProfile d;
  d.name = "b200";
  d.description = "NVIDIA B200 (HGX B200, 1000 W) 180 GB";
  d.source =
      "https://www.nvidia.com/en-us/data-center/hgx/ (HGX B200: per GPU 2.25 PF bf16, 4.5 PF fp8, 1.1 PF tf32 "
      "dense; 8 TB/s HBM3e; NVLink 5 1.8 TB/s)";
  d.bf16_flops = 2250 * kTFLOPS;
  d.fp8_flops = 4500 * kTFLOPS;
  d.f32_flops = 1100 * kTFLOPS;
  d.memory_bytes = 180 * kGB;
  d.memory_bytes_per_second = 8000 * kGB;
  d.devices_per_node = 8;
  d.intra_node = {kNvlinkLatency, 900 * kGB};  // NVLink 5: 1.8 TB/s bidirectional per GPU
  d.inter_node = {kNetworkLatency, 50 * kGB};  // DGX B200: 8 x 400 Gb/s ConnectX-7, one per GPU
  // Newer kernels are less mature: reported large bf16 GEMMs reach ~1.5-1.6 of 2.25 PF.
  d.gemm_max_efficiency = 0.7;
  d.gemm_half_dim = 96;  // larger (2-SM) tiles than Hopper's: thin shapes fall off sooner
  d.attention_efficiency = 0.5;
  d.memory_efficiency = 0.8;
  d.op_overhead_seconds = kGpuLaunchOverhead;
  return d;
}

DeviceProfile published_a100() {
  DeviceProfile d;
  d.name = "a100";
  d.description = "NVIDIA A100 SXM4 80 GB";
  d.source = "https://www.nvidia.com/en-us/data-center/a100/ (A100 80GB SXM datasheet; dense figures)";
  d.bf16_flops = 312 * kTFLOPS;
  d.fp8_flops = 0;  // no fp8 tensor cores on Ampere
  d.f32_flops = 156 * kTFLOPS;
  d.memory_bytes = 80 * kGB;
  d.memory_bytes_per_second = 2039 * kGB;
  d.devices_per_node = 8;
  d.intra_node = {kNvlinkLatency, 300 * kGB};  // NVLink 3: 600 GB/s bidirectional per GPU
  d.inter_node = {kNetworkLatency, 25 * kGB};  // DGX A100: 8 x 200 Gb/s HDR InfiniBand, one per GPU
  // cuBLAS reaches ~250-270 of 312 TFLOP/s on large bf16 GEMMs.
  d.gemm_max_efficiency = 0.82;
  d.gemm_half_dim = 48;
  d.attention_efficiency = 0.55;  // FlashAttention-2 reports 50-73% of peak on A100
  d.memory_efficiency = 0.85;
  d.op_overhead_seconds = kGpuLaunchOverhead;
  return d;
}

DeviceProfile published_mi300x() {
  DeviceProfile d;
  d.name = "mi300x";
  d.description = "AMD Instinct MI300X OAM 192 GB";
  d.source =
      "https://www.amd.com/en/products/accelerators/instinct/mi300/mi300x.html (MI300X datasheet: 1307.4 TF "
      "bf16, 2614.9 TF fp8, 653.7 TF tf32 dense; 5.3 TB/s; 7 x 128 GB/s bidirectional Infinity Fabric links)";
  d.bf16_flops = 1307.4 * kTFLOPS;
  d.fp8_flops = 2614.9 * kTFLOPS;
  d.f32_flops = 653.7 * kTFLOPS;
  d.memory_bytes = 192 * kGB;
  d.memory_bytes_per_second = 5300 * kGB;
  d.devices_per_node = 8;
  // A fully connected mesh, no switch: each GPU has 7 links of 64 GB/s each
  // way, one per peer (448 GB/s each way in all). A single ring uses one link
  // per step; RCCL runs several rings over different links at once, which on
  // an 8-GPU mesh cannot keep all 7 links busy every step. We assume 75% of
  // the aggregate, ~336 GB/s (RCCL all-reduce bus bandwidths reported for 8 x
  // MI300X are in the low-to-mid 300s GB/s).
  d.intra_node = {kNvlinkLatency, 0.75 * 448 * kGB};
  d.inter_node = {kNetworkLatency, 50 * kGB};  // one 400 Gb/s NIC per GPU, as on H100 clusters
  // hipBLASLt reaches roughly 55-65% of the bf16 peak on large GEMMs (independent benchmarks, 2024).
  d.gemm_max_efficiency = 0.6;
  d.gemm_half_dim = 96;
  d.attention_efficiency = 0.35;  // CK / Triton FlashAttention on MI300X trails H100's share of peak
  d.memory_efficiency = 0.75;
  d.op_overhead_seconds = kGpuLaunchOverhead;
  return d;
}

// TPUs: a "node" is one TPU VM host (4 chips on v5p, 8 on v6e), but within a
// slice every chip reaches every other over ICI, the hosts included, so both
// link classes are ICI here; data-centre networking (DCN) joins slices only
// (multislice), which plans on one slice never use. A collective over one axis
// of the torus runs a bidirectional ring through two of the chip's ports:
// counted as this model's one-way ring, two ports' one-way bandwidth.
DeviceProfile published_tpu_v5p() {
  DeviceProfile d;
  d.name = "tpu_v5p";
  d.description = "Google Cloud TPU v5p (95 GiB HBM2e, 3D torus)";
  d.source =
      "https://cloud.google.com/tpu/docs/v5p (459 TFLOPs bf16 and fp8 per chip, 95 GiB at 2765 GBps, ICI 1200 "
      "GBps bidirectional per chip over 6 ports, 4 chips per host)";
  d.bf16_flops = 459 * kTFLOPS;
  d.fp8_flops = 459 * kTFLOPS;      // published: fp8 runs, at the bf16 rate
  d.f32_flops = 459 * kTFLOPS / 3;  // f32 matmuls take ~3 bf16 passes on the MXU (XLA's default precision)
  d.memory_bytes = 95.0 * 1024 * 1024 * 1024;
  d.memory_bytes_per_second = 2765 * kGB;
  d.devices_per_node = 4;
  // 1200 GB/s bidirectional over 6 ports = 100 GB/s each way per port; two ports.
  d.intra_node = {kIciLatency, 200 * kGB};
  d.inter_node = d.intra_node;
  // XLA's matmuls keep the 128 x 128 MXUs busy well (~80% on large shapes);
  // dimensions below a few multiples of 128 pad the systolic array.
  d.gemm_max_efficiency = 0.8;
  d.gemm_half_dim = 128;
  d.attention_efficiency = 0.5;  // Pallas flash attention
  d.memory_efficiency = 0.8;
  d.op_overhead_seconds = 0;  // XLA compiles the step into a few fused programs
  return d;
}

DeviceProfile published_tpu_v6e() {
  DeviceProfile d = published_tpu_v5p();
  d.name = "tpu_v6e";
  d.description = "Google Cloud TPU v6e Trillium (32 GB HBM, 2D torus)";
  d.source =
      "https://cloud.google.com/tpu/docs/v6e (918 TFLOPs bf16, 1836 TOPs int8 per chip, 32 GB at 1638 GBps, ICI "
      "800 GBps bidirectional per chip over 4 ports, 8 chips per host, 256-chip pod)";
  d.bf16_flops = 918 * kTFLOPS;
  d.fp8_flops = 0;  // no published fp8 figure (int8 only)
  d.f32_flops = 918 * kTFLOPS / 3;
  d.memory_bytes = 32 * kGB;
  d.memory_bytes_per_second = 1638 * kGB;
  d.devices_per_node = 8;
  // 800 GB/s bidirectional over 4 ports = 100 GB/s each way per port; two ports.
  d.intra_node = {kIciLatency, 200 * kGB};
  d.inter_node = d.intra_node;
  d.gemm_half_dim = 256;  // 256 x 256 MXUs
  return d;
}

const std::map<std::string, DeviceProfile>& published_profiles() {
  static const std::map<std::string, DeviceProfile> profiles = [] {
    std::map<std::string, DeviceProfile> out;
    for (DeviceProfile profile : {published_h100(), published_h200(), published_b200(), published_a100(),
                                  published_mi300x(), published_tpu_v5p(), published_tpu_v6e()}) {
      out.emplace(profile.name, std::move(profile));
    }
    return out;
  }();
  return profiles;
}

// ---- measuring this machine ------------------------------------------------

using ProfileClock = std::chrono::steady_clock;

double profile_median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
}

// Median seconds of `body` over `repetitions` runs after one warm-up.
template <typename Body>
double profile_time(int repetitions, Body&& body) {
  body();
  std::vector<double> seconds;
  for (int i = 0; i < repetitions; ++i) {
    const auto start = ProfileClock::now();
    body();
    seconds.push_back(std::chrono::duration<double>(ProfileClock::now() - start).count());
  }
  return profile_median(seconds);
}

// Standard-normal values of `shape`, in `dtype`.
Tensor profile_random(const std::vector<int64_t>& shape, DType dtype, Generator& generator) {
  Tensor t = Tensor::empty(shape);
  ops::normal_(t, 0, 1, generator);
  return t.to(dtype);
}

// Median seconds of one [m, k] x [k, n] product in `dtype`.
double profile_gemm_seconds(int64_t m, int64_t n, int64_t k, DType dtype) {
  Generator generator(0);
  const Tensor a = profile_random({m, k}, dtype, generator), b = profile_random({k, n}, dtype, generator);
  const Tensor c = Tensor::empty({m, n}, dtype);
  const double flops = 2.0 * static_cast<double>(m * n * k);
  // Enough repetitions for ~0.1 s of small products, at least 3 of large ones.
  const int repetitions = static_cast<int>(std::clamp(2e10 / std::max(flops, 1.0), 3.0, 200.0));
  return profile_time(repetitions, [&] { ops::gemm(a, b, c); });
}

// Attention efficiency (of the bf16 peak `peak_flops`) of titan's flash
// kernel, forward plus backward, causal, bf16, on 2 sequences of 512 tokens
// whose heads of `head_dim` make 512 columns: the FLOPs counted as the cost
// model counts them (forward 2 x tokens x keys/2 x 2 head_dim per head,
// backward 2.5 forwards).
double profile_attention_efficiency(int64_t head_dim, double peak_flops) {
  constexpr int64_t kBatch = 2, kSeq = 512, kWidth = 512;
  const int64_t heads = kWidth / head_dim;
  Generator generator(0);
  const auto random = [&] { return profile_random({kBatch, kSeq, heads, head_dim}, DType::bf16, generator); };
  const Tensor q = random(), k = random(), v = random(), grad = random();
  const ops::AttentionMask mask(true);
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const double seconds = profile_time(5, [&] {
    const ops::AttentionOutput out = ops::flash_attention(q, k, v, mask, scale);
    ops::flash_attention_backward(grad, q, k, v, out.out, out.lse, mask, scale);
  });
  const double tokens = static_cast<double>(kBatch * kSeq);
  const double forward_flops = 2.0 * tokens * (kSeq / 2.0) * 2.0 * static_cast<double>(kWidth);
  return 3.5 * forward_flops / (seconds * peak_flops);
}

// The per-op host cost: a tiny elementwise op, whose arithmetic is nothing.
double profile_op_overhead() {
  const Tensor x = Tensor::full({16}, 1.0);
  constexpr int kBatch = 200;
  return profile_time(15,
                      [&] {
                        for (int i = 0; i < kBatch; ++i) ops::scale_(x, 1.0f);
                      }) /
         kBatch;
}

// Bytes per second read plus written by a 256 MB streaming copy.
double profile_memory_bandwidth() {
  const int64_t count = 64 * 1024 * 1024;  // f32: 256 MiB
  const Tensor source = Tensor::full({count}, 1.0), destination = Tensor::zeros({count});
  const double seconds = profile_time(5, [&] { titan::copy_(destination, source); });
  return 2.0 * static_cast<double>(count) * 4 / seconds;
}

double profile_shape_factor(double dim, double half_dim) { return dim / (dim + half_dim); }

double profile_mem_total_bytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    if (line.rfind("MemTotal:", 0) == 0) {
      std::istringstream fields(line.substr(9));
      double kib = 0;
      fields >> kib;
      return kib * 1024;
    }
  }
  fail("measure_cpu_profile: no MemTotal in /proc/meminfo");
}

// The links between two MPI ranks on this machine (Open MPI's shared-memory
// transport, titan's buffers), as `titan plan --probe-links` measured them on
// the 2-core development machine when this profile was written (ring steps
// of 2 ranks, several runs on a machine shared with builds: latency 5-20 us,
// 10-20 GB/s while a message stays within ~4 MiB of cache, 1-3 GB/s beyond;
// a collective's hand-off to the group's worker 7-15 us). Used when the
// probe is not run (measure_links off).
constexpr LinkProfile kCpuFallbackLink = {10e-6, 2.5e9, 4 << 20, 12e9};
constexpr double kCpuFallbackCollectiveOverhead = 10e-6;

}  // namespace

const DeviceProfile& published_device_profile(const std::string& name) {
  const auto& profiles = published_profiles();
  const auto found = profiles.find(name);
  if (found == profiles.end()) {
    std::string known;
    for (const auto& each : device_profile_names()) known += (known.empty() ? "" : ", ") + each;
    fail("unknown device type '{}' (known: {}; cpu is measured, not published)", name, known);
  }
  return found->second;
}

std::vector<std::string> device_profile_names() {
  return {"h100", "h200", "b200", "a100", "mi300x", "tpu_v5p", "tpu_v6e", "cpu"};
}

DeviceProfile measure_cpu_profile(const CpuProbeOptions& options) {
  TITAN_CHECK(options.ranks_per_node >= 1, "measure_cpu_profile: ranks_per_node {} must be at least 1",
              options.ranks_per_node);
  DeviceProfile d;
  d.name = "cpu";
  d.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  d.threads_per_rank =
      options.threads_per_rank > 0 ? options.threads_per_rank : std::max(1, d.cores / options.ranks_per_node);
  d.description = fmt::format("this machine's CPU ({} cores, {} ranks x {} threads)", d.cores, options.ranks_per_node,
                              d.threads_per_rank);
  d.devices_per_node = options.ranks_per_node;
  d.memory_bytes = profile_mem_total_bytes() / options.ranks_per_node;

  const int previous_threads = omp_get_max_threads();
  omp_set_num_threads(d.threads_per_rank);
  // The host pays each op in line: measured first, so that the GEMM fit below
  // can take it off the small products' times (the cost model adds it per op).
  d.op_overhead_seconds = profile_op_overhead();
  d.overhead_in_line = true;
  d.memory_bytes_per_second = profile_memory_bandwidth();
  // Elementwise traffic is titan's kernels, not copies: their rate on a
  // debug block's shapes over the streaming copy's.
  d.memory_efficiency = std::min(1.0, elementwise_mix_rate(2048, 256, 768) / d.memory_bytes_per_second);

  // Peaks: the trainer's own CPU peak (a large square product), so MFU agrees with `titan train`'s.
  d.bf16_flops = train::measured_cpu_gemm_tflops(DType::bf16) * kTFLOPS;
  d.f32_flops = train::measured_cpu_gemm_tflops(DType::f32) * kTFLOPS;
  d.fp8_flops = 0;

  // The shape curve f(d) = d / (d + h) fitted in log time to thin and
  // mid-sized products, the shapes of the models a CPU trains: for each h on
  // a grid, the best scale (peak x maximum efficiency) is the geometric mean
  // of the implied ones. The peak stays the large square's, so the maximum
  // efficiency is the fitted scale over it: above 1 on CPUs, whose large
  // square falls out of the caches and runs below the mid-sized products
  // (which the curve, rising with size, cannot follow: left out of the fit).
  struct Shape {
    int64_t m, n, k;
    double seconds;
  };
  std::vector<Shape> shapes;
  for (const int64_t m : {16, 64, 256}) shapes.push_back({m, 512, 512, 0});
  for (const int64_t dim : {512, 1024}) shapes.push_back({dim, dim, dim, 0});
  for (auto& shape : shapes) {
    shape.seconds =
        std::max(1e-9, profile_gemm_seconds(shape.m, shape.n, shape.k, DType::bf16) - d.op_overhead_seconds);
  }
  omp_set_num_threads(previous_threads);
  double best_h = 1, best_scale = d.bf16_flops, best_error = INFINITY;
  // h from 0.5 up to 4096 in steps of 5% (an integer count: a float induction drifts).
  for (int step = 0; step < 185; ++step) {
    const double h = 0.5 * std::pow(1.05, step);
    // log(seconds) = log(flops / f(m) f(n) f(k)) - log(scale): the best log(scale) is the mean.
    double log_scale = 0;
    for (const auto& shape : shapes) {
      const double shaped =
          2.0 * shape.m * shape.n * shape.k /
          (profile_shape_factor(shape.m, h) * profile_shape_factor(shape.n, h) * profile_shape_factor(shape.k, h));
      log_scale += std::log(shaped / shape.seconds) / static_cast<double>(shapes.size());
    }
    double error = 0;
    for (const auto& shape : shapes) {
      const double shaped =
          2.0 * shape.m * shape.n * shape.k /
          (profile_shape_factor(shape.m, h) * profile_shape_factor(shape.n, h) * profile_shape_factor(shape.k, h));
      error += std::pow(std::log(shaped / shape.seconds) - log_scale, 2);
    }
    if (error < best_error) best_error = error, best_h = h, best_scale = std::exp(log_scale);
  }
  d.gemm_half_dim = best_h;
  d.gemm_max_efficiency = best_scale / d.bf16_flops;
  // Attention runs titan's CPU flash kernel, measured at head dimensions 16
  // and 128: e(hd) = max x hd / (hd + h) through both points (a debug
  // model's 16-wide heads run at a fraction of a 128-wide one's rate).
  omp_set_num_threads(d.threads_per_rank);
  const double narrow = profile_attention_efficiency(16, d.bf16_flops);
  const double wide = profile_attention_efficiency(128, d.bf16_flops);
  omp_set_num_threads(previous_threads);
  const double ratio = std::clamp(narrow / wide, 0.2, 0.99);  // (16/(16+h)) / (128/(128+h)) lies in (1/8, 1)
  d.attention_half_dim = 2048.0 * (1.0 - ratio) / (128.0 * ratio - 16.0);
  d.attention_efficiency = wide / profile_shape_factor(128, d.attention_half_dim);

  if (options.measure_links) {
    TITAN_CHECK(!options.titan_executable.empty(), "measure_cpu_profile: measure_links needs titan_executable");
    const LinkProbeResult probe =
        launch_link_probe(link_probe_command(options.titan_executable, std::max(2, options.ranks_per_node)));
    // The ring step (every rank sending at once) is what a collective's step
    // pays on a machine whose ranks share cores and memory; ping-pong, two
    // ranks alone, would flatter it when more ranks than cores run.
    d.intra_node = probe.ring_step_link;
    d.collective_overhead_seconds = probe.collective_overhead_seconds;
    // When the node's ranks keep every core computing, a call issued beside
    // compute waits for the scheduler on each rank it involves.
    if (options.ranks_per_node * d.threads_per_rank >= d.cores) {
      d.contended_collective_seconds = probe.contended_call_seconds;
    }
    d.source = fmt::format("measured on this machine (links: titan plan --probe-links on {} ranks)", probe.ranks);
  } else {
    d.intra_node = kCpuFallbackLink;
    d.collective_overhead_seconds = kCpuFallbackCollectiveOverhead;
    d.source =
        "measured on this machine (links: not probed; the MPI shared-memory figures measured on the "
        "development machine when the profile was written)";
  }
  // Across nodes the ranks would talk TCP; one machine cannot measure that, so
  // the in-machine figures stand in (plans on the CPU stay on one node).
  d.inter_node = d.intra_node;
  return d;
}

double gemm_seconds(const DeviceProfile& device, double m, double n, double k, DType dtype) {
  const double efficiency = device.gemm_max_efficiency * profile_shape_factor(m, device.gemm_half_dim) *
                            profile_shape_factor(n, device.gemm_half_dim) *
                            profile_shape_factor(k, device.gemm_half_dim);
  const double compute = 2.0 * m * n * k / (device.peak_flops(dtype) * efficiency);
  const double bytes = static_cast<double>(dtype_size(dtype)) * (m * k + k * n + m * n);
  const double memory = bytes / (device.memory_bytes_per_second * device.memory_efficiency);
  return std::max(compute, memory);
}

double attention_efficiency(const DeviceProfile& device, double head_dim) {
  if (device.attention_half_dim <= 0) return device.attention_efficiency;
  return device.attention_efficiency * profile_shape_factor(head_dim, device.attention_half_dim);
}

double elementwise_mix_rate(int64_t tokens, int64_t width, int64_t hidden) {
  Generator generator(0);
  const auto random = [&](int64_t columns) { return profile_random({tokens, columns}, DType::bf16, generator); };
  const Tensor x = random(width), residual = random(width), gate = random(hidden), up = random(hidden);
  const Tensor grad_hidden = random(hidden), weight = Tensor::full({width}, 1.0).to(DType::bf16);
  const double narrow = static_cast<double>(tokens * width) * 2, wide = static_cast<double>(tokens * hidden) * 2;
  // Reads plus writes, kernel by kernel below (the f32 copy is twice as wide).
  const double bytes = 2 * narrow + 3 * narrow + 3 * narrow + 3 * wide + 5 * wide + 3 * narrow + 3 * narrow;
  const double seconds = profile_time(5, [&] {
    const ops::RmsNormOutput normed = ops::rms_norm(x, weight, 1e-5f);
    ops::rms_norm_backward(normed.y, x, weight, normed.rstd);
    ops::add(x, residual);
    ops::swiglu(gate, up);
    ops::swiglu_backward(grad_hidden, gate, up);
    x.to(DType::f32).to(DType::bf16);
  });
  return bytes / seconds;
}

}  // namespace titan::plan
