#include "titan/plan/link_probe.h"

#include <mpi.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "titan/comm/world.h"
#include "titan/core/error.h"
#include "titan/core/tensor.h"

namespace titan::plan {

namespace {

using LinkProbeClock = std::chrono::steady_clock;

double link_probe_seconds_since(LinkProbeClock::time_point start) {
  return std::chrono::duration<double>(LinkProbeClock::now() - start).count();
}

double link_probe_median(std::vector<double> values) {
  TITAN_CHECK(!values.empty(), "link probe: no timings to take the median of");
  std::sort(values.begin(), values.end());
  const size_t middle = values.size() / 2;
  return values.size() % 2 == 1 ? values[middle] : 0.5 * (values[middle - 1] + values[middle]);
}

// Enough repetitions that the median ignores a descheduled one (this machine
// is shared), few enough that 64 MiB messages stay quick.
int link_probe_repetitions(double bytes) {
  if (bytes <= 64.0 * 1024) return 31;
  if (bytes <= 4.0 * 1024 * 1024) return 11;
  return 7;
}

// Every rank's timings of the same repetitions; the slowest rank's is the
// operation's (a collective is done when its last member is).
std::vector<double> link_probe_slowest(comm::ProcessGroup& group, const std::vector<double>& mine) {
  std::vector<float> values(mine.begin(), mine.end());
  const Tensor tensor = Tensor::from_floats(values, {static_cast<int64_t>(values.size())});
  group.all_reduce(tensor, comm::ReduceOp::max)->wait();
  const float* data = tensor.data<float>();
  return std::vector<double>(data, data + values.size());
}

// The link itself is timed with blocking MPI calls on a communicator of its
// own: what the steps inside titan's collectives are (its ring
// reduce-scatter's MPI_Sendrecv, Open MPI's all-gather and all-to-all), which
// progress the transfer while they wait. (A pipeline's send/recv posts
// non-blocking requests whose waits sleep between polls: slower for large
// messages on an oversubscribed machine; not what collectives pay.)

// One-way times between ranks 0 and 1 (half a round trip). The other ranks
// wait asleep (a posted receive's wait sleeps between polls) so that the two
// have the machine's cores to themselves.
std::vector<LinkProbeSample> link_probe_ping_pong(comm::ProcessGroup& group, MPI_Comm comm) {
  const std::array<double, 11> sizes = {8, 64, 512, 4096, 32768, 262144, 1 << 20, 4 << 20, 8 << 20, 16 << 20, 64 << 20};
  std::vector<LinkProbeSample> samples;
  const int me = group.rank();
  if (me >= 2) {
    group.recv(Tensor::empty({1}), 0, 7)->wait();
  } else {
    const int peer = 1 - me;
    for (const double bytes : sizes) {
      const Tensor buffer = Tensor::full({static_cast<int64_t>(bytes)}, 1.0, DType::u8);
      void* data = buffer.data_ptr();
      const int count = static_cast<int>(bytes);
      const int repetitions = link_probe_repetitions(bytes);
      std::vector<double> seconds;
      for (int rep = -2; rep < repetitions; ++rep) {  // two warm-up round trips
        const auto start = LinkProbeClock::now();
        if (me == 0) {
          MPI_Send(data, count, MPI_BYTE, peer, 1, comm);
          MPI_Recv(data, count, MPI_BYTE, peer, 1, comm, MPI_STATUS_IGNORE);
        } else {
          MPI_Recv(data, count, MPI_BYTE, peer, 1, comm, MPI_STATUS_IGNORE);
          MPI_Send(data, count, MPI_BYTE, peer, 1, comm);
        }
        if (rep >= 0) seconds.push_back(link_probe_seconds_since(start) / 2);
      }
      samples.push_back({bytes, link_probe_median(seconds)});
    }
    if (me == 0) {
      for (int rank = 2; rank < group.size(); ++rank) group.send(Tensor::zeros({1}), rank, 7)->wait();
    }
  }
  group.barrier();
  return samples;
}

// The ring step's message sizes: from latency-bound to well past the caches.
constexpr std::array<double, 12> kRingStepSizes = {8,       512,     4096,    65536,    262144,   1 << 20,
                                                   2 << 20, 4 << 20, 8 << 20, 16 << 20, 32 << 20, 64 << 20};

// Every rank sends `bytes` to the next and receives as much from the previous
// at once (MPI_Sendrecv, as titan's ring reduce-scatter does), two steps in a
// row so that the neighbours' skew overlaps as in a ring. Seconds per step.
double link_probe_ring_step(comm::ProcessGroup& group, MPI_Comm comm, const Tensor& out, const Tensor& in,
                            double bytes) {
  const int next = (group.rank() + 1) % group.size(), previous = (group.rank() + group.size() - 1) % group.size();
  const int count = static_cast<int>(bytes);
  constexpr int kSteps = 2;
  group.barrier();
  const auto start = LinkProbeClock::now();
  for (int step = 0; step < kSteps; ++step) {
    MPI_Sendrecv(out.data_ptr(), count, MPI_BYTE, next, 2, in.data_ptr(), count, MPI_BYTE, previous, 2, comm,
                 MPI_STATUS_IGNORE);
  }
  return link_probe_seconds_since(start) / kSteps;
}

// An 8-byte all-gather on a group of this rank alone, every rank at once:
// the hand-off to the group's worker and back, with no message.
double link_probe_call_overhead(comm::ProcessGroup& alone) {
  const Tensor input = Tensor::zeros({2}), output = Tensor::zeros({2});
  std::vector<double> seconds;
  for (int rep = -1; rep < 5; ++rep) {
    const auto start = LinkProbeClock::now();
    alone.all_gather(output, input)->wait();
    if (rep >= 0) seconds.push_back(link_probe_seconds_since(start));
  }
  return link_probe_median(seconds);
}

// Seconds per small all-gather on `group` while threads of arithmetic fill
// this rank's share of the cores (see LinkProbeResult::contended_call_seconds).
double link_probe_contended_call(comm::ProcessGroup& group) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int threads = std::max(1, cores / group.size());
  std::atomic<bool> stop{false};
  std::vector<std::thread> compute;
  compute.reserve(static_cast<size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    compute.emplace_back([&stop] {
      double x = 1.0;
      while (!stop.load(std::memory_order_relaxed)) {
        for (int i = 0; i < 1000; ++i) x = x * 1.0000001 + 1e-9;
      }
      volatile double sink = x;
      (void)sink;
    });
  }
  const Tensor input = Tensor::zeros({16}), output = Tensor::zeros({16 * group.size()});
  std::vector<double> seconds;
  for (int rep = -2; rep < 21; ++rep) {
    const auto start = LinkProbeClock::now();
    group.all_gather(output, input)->wait();
    if (rep >= 0) seconds.push_back(link_probe_seconds_since(start));
  }
  stop = true;
  for (std::thread& thread : compute) thread.join();
  return link_probe_median(link_probe_slowest(group, seconds));
}

// The buffers of one collective of about `collective_bytes` (its larger buffer) on the group.
struct LinkProbeCall {
  Collective collective;
  Tensor whole, other, part;
  std::vector<int64_t> splits;
  std::vector<double> seconds;

  LinkProbeCall(Collective which, double collective_bytes, int64_t members) : collective(which) {
    const int64_t count = std::max<int64_t>(1, static_cast<int64_t>(collective_bytes) / 4 / members) * members;
    whole = Tensor::zeros({count});
    other = Tensor::zeros({count});
    part = Tensor::zeros({count / members});
    splits.assign(static_cast<size_t>(members), count / members);
  }
  double bytes() const { return static_cast<double>(whole.nbytes()); }

  // Seconds per call of a few calls back to back (as a training step issues
  // them: the ranks' skew after the barrier is spread over the calls, not
  // charged to one), timed from the first issue to the last done on this rank.
  double run(comm::ProcessGroup& group) const {
    const int repeats = bytes() < (1 << 20) ? 4 : bytes() < (16 << 20) ? 2 : 1;
    group.barrier();
    const auto start = LinkProbeClock::now();
    for (int i = 0; i < repeats; ++i) call(group);
    return link_probe_seconds_since(start) / repeats;
  }

  void call(comm::ProcessGroup& group) const {
    switch (collective) {
      case Collective::all_gather:
        return group.all_gather(whole, part)->wait();
      case Collective::reduce_scatter:
        return group.reduce_scatter(part, whole, comm::ReduceOp::sum)->wait();
      case Collective::all_reduce:
        return group.all_reduce(whole, comm::ReduceOp::sum)->wait();
      case Collective::all_to_all:
        return group.all_to_all(other, whole, splits, splits)->wait();
      case Collective::broadcast:
        return group.broadcast(whole, 0)->wait();
      case Collective::send_recv:
        fail("link probe: send/recv is the ping-pong, not a timed collective");
    }
  }
};

nlohmann::json link_probe_samples_json(const std::vector<LinkProbeSample>& samples) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& sample : samples) out.push_back({{"bytes", sample.bytes}, {"seconds", sample.seconds}});
  return out;
}

nlohmann::json link_probe_link_json(const LinkProfile& link) {
  return {{"latency_seconds", link.latency_seconds},
          {"bytes_per_second", link.bytes_per_second},
          {"cached_bytes", link.cached_bytes},
          {"cached_bytes_per_second", link.cached_bytes_per_second}};
}

std::vector<LinkProbeSample> link_probe_samples_from(const nlohmann::json& array) {
  std::vector<LinkProbeSample> samples;
  for (const auto& item : array) samples.push_back({item.at("bytes").get<double>(), item.at("seconds").get<double>()});
  return samples;
}

Collective link_probe_collective_named(const std::string& name) {
  for (const Collective collective : {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce,
                                      Collective::all_to_all, Collective::send_recv, Collective::broadcast}) {
    if (name == collective_name(collective)) return collective;
  }
  fail("link probe output: unknown collective '{}'", name);
}

}  // namespace

LinkProfile fit_link(const std::vector<LinkProbeSample>& samples) {
  std::vector<double> small;
  std::vector<LinkProbeSample> large;
  for (const auto& sample : samples) {
    if (sample.bytes <= 4096) small.push_back(sample.seconds);
    if (sample.bytes >= 65536) large.push_back(sample);
  }
  TITAN_CHECK(!small.empty() && large.size() >= 2,
              "link probe: need messages up to 4 KiB and two from 64 KiB up to fit a link");
  std::sort(large.begin(), large.end(), [](const auto& a, const auto& b) { return a.bytes < b.bytes; });
  LinkProfile best;
  best.latency_seconds = link_probe_median(small);
  const double latency = best.latency_seconds;
  // Bandwidth through the origin of (seconds - latency) against bytes over [begin, end).
  const auto bandwidth = [&](size_t begin, size_t end) {
    double bytes_squared = 0, bytes_times_seconds = 0;
    for (size_t i = begin; i < end; ++i) {
      bytes_squared += large[i].bytes * large[i].bytes;
      bytes_times_seconds += large[i].bytes * std::max(large[i].seconds - latency, 1e-9);
    }
    return bytes_squared / bytes_times_seconds;
  };
  double best_error = INFINITY;
  // split = how many of the large messages are cached: 0 (one bandwidth) or at least two, leaving two above.
  for (size_t split = 0; split + 2 <= large.size(); split = split == 0 ? 2 : split + 1) {
    LinkProfile link;
    link.latency_seconds = latency;
    link.bytes_per_second = bandwidth(split, large.size());
    if (split > 0) {
      link.cached_bytes = large[split - 1].bytes;
      link.cached_bytes_per_second = bandwidth(0, split);
      if (link.cached_bytes_per_second <= link.bytes_per_second) continue;  // no faster regime below the split
    }
    double error = 0;
    for (const auto& sample : large)
      error += std::pow(std::log(link.message_seconds(sample.bytes) / sample.seconds), 2);
    // A split must earn its two extra parameters: a clearly better fit only.
    if (split > 0) error *= 1.5;
    if (error < best_error) best_error = error, best = link;
  }
  return best;
}

int run_link_probe() {
  comm::World& world = comm::World::instance();
  comm::ProcessGroup& group = *world.group();
  if (group.size() < 2) {
    std::cerr << "titan plan --probe-links: run it on at least two ranks (mpirun -np 2 titan plan --probe-links)\n";
    return 1;
  }
  LinkProbeResult result;
  result.ranks = group.size();
  // The world group's ranks are MPI_COMM_WORLD's; the probe's messages get a communicator of their own.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  result.ping_pong = link_probe_ping_pong(group, comm);
  const auto alone = group.split(group.rank(), 0, "link_probe_alone");
  std::vector<double> overhead_seconds;
  // Ring steps and collectives take turns, repetition by repetition: on a
  // shared machine the load changes over seconds, and the medians of
  // interleaved runs see the same load.
  std::vector<LinkProbeCall> calls;
  for (const Collective collective :
       {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce, Collective::all_to_all}) {
    for (const double bytes : {64.0 * 1024, 4.0 * 1024 * 1024, 32.0 * 1024 * 1024}) {
      calls.emplace_back(collective, bytes, group.size());
    }
  }
  // Tensors, like the collectives' buffers: titan's allocator backs them with
  // huge pages, which large shared-memory copies run several times faster on.
  const auto size = static_cast<int64_t>(kRingStepSizes.back());
  const Tensor out = Tensor::full({size}, 1.0, DType::u8), in = Tensor::zeros({size}, DType::u8);
  std::vector<std::vector<double>> step_seconds(kRingStepSizes.size());
  constexpr int kRepetitions = 7;
  for (int rep = -1; rep < kRepetitions; ++rep) {  // one warm-up
    for (size_t i = 0; i < kRingStepSizes.size(); ++i) {
      const double seconds = link_probe_ring_step(group, comm, out, in, kRingStepSizes[i]);
      if (rep >= 0) step_seconds[i].push_back(seconds);
    }
    for (auto& call : calls) {
      const double seconds = call.run(group);
      if (rep >= 0) call.seconds.push_back(seconds);
    }
    group.barrier();
    const double overhead = link_probe_call_overhead(*alone);
    if (rep >= 0) overhead_seconds.push_back(overhead);
  }
  result.collective_overhead_seconds = link_probe_median(link_probe_slowest(group, overhead_seconds));
  result.contended_call_seconds = link_probe_contended_call(group);
  MPI_Comm_free(&comm);
  for (size_t i = 0; i < kRingStepSizes.size(); ++i) {
    result.ring_step.push_back({kRingStepSizes[i], link_probe_median(link_probe_slowest(group, step_seconds[i]))});
  }
  for (const auto& call : calls) {
    result.collectives.push_back(
        {call.collective, call.bytes(), link_probe_median(link_probe_slowest(group, call.seconds))});
  }
  if (group.rank() == 0) {
    result.ping_pong_link = fit_link(result.ping_pong);
    result.ring_step_link = fit_link(result.ring_step);
    nlohmann::json collectives = nlohmann::json::array();
    for (const auto& timing : result.collectives) {
      collectives.push_back(
          {{"collective", collective_name(timing.collective)}, {"bytes", timing.bytes}, {"seconds", timing.seconds}});
    }
    const nlohmann::json out = {{"ranks", result.ranks},
                                {"nodes", world.nodes()},
                                {"ping_pong", link_probe_samples_json(result.ping_pong)},
                                {"ping_pong_link", link_probe_link_json(result.ping_pong_link)},
                                {"ring_step", link_probe_samples_json(result.ring_step)},
                                {"ring_step_link", link_probe_link_json(result.ring_step_link)},
                                {"collective_overhead_seconds", result.collective_overhead_seconds},
                                {"contended_call_seconds", result.contended_call_seconds},
                                {"collectives", collectives}};
    std::cout << out.dump() << std::endl;
  }
  group.barrier();
  return 0;
}

LinkProbeResult parse_link_probe(const std::string& output) {
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line.front() != '{') continue;
    const nlohmann::json in = nlohmann::json::parse(line);
    LinkProbeResult result;
    result.ranks = in.at("ranks").get<int>();
    result.ping_pong = link_probe_samples_from(in.at("ping_pong"));
    result.ring_step = link_probe_samples_from(in.at("ring_step"));
    result.ping_pong_link = fit_link(result.ping_pong);
    result.ring_step_link = fit_link(result.ring_step);
    result.collective_overhead_seconds = in.at("collective_overhead_seconds").get<double>();
    result.contended_call_seconds = in.at("contended_call_seconds").get<double>();
    for (const auto& item : in.at("collectives")) {
      result.collectives.push_back({link_probe_collective_named(item.at("collective").get<std::string>()),
                                    item.at("bytes").get<double>(), item.at("seconds").get<double>()});
    }
    return result;
  }
  fail("link probe: no JSON object in its output:\n{}", output);
}

std::string link_probe_command(const std::string& executable, int ranks) {
  return "mpirun --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) + " '" + executable +
         "' plan --probe-links";
}

LinkProbeResult launch_link_probe(const std::string& command) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  TITAN_CHECK(pipe != nullptr, "link probe: could not run '{}'", command);
  std::string output;
  std::array<char, 4096> chunk{};
  size_t got = 0;
  while ((got = fread(chunk.data(), 1, chunk.size(), pipe)) > 0) output.append(chunk.data(), got);
  const int status = pclose(pipe);
  TITAN_CHECK(status == 0, "link probe: '{}' failed (status {}):\n{}", command, status, output);
  return parse_link_probe(output);
}

}  // namespace titan::plan
