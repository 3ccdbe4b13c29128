#include "titan/comm/world.h"

#include <mpi.h>

#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "titan/comm/local_process_group.h"
#include "titan/comm/mpi_process_group.h"
#include "titan/comm/nccl_process_group.h"
#include "titan/comm/stall_census.h"

namespace titan::comm {

bool World::started_by_launcher() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

World& World::instance(double timeout_seconds) {
  static World world(timeout_seconds);
  return world;
}

std::string this_node_name() {
  if (const char* slurm = std::getenv("SLURMD_NODENAME"); slurm != nullptr && *slurm != '\0') return slurm;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "localhost";
  return host;
}

World::World(double timeout_seconds) : timeout_seconds_(timeout_seconds) {
  if (!started_by_launcher()) {
    // srun without a PMI (--mpi=none, a cluster whose MpiDefault is none) starts
    // every task as a job of its own: N copies training alone into one dump folder.
    if (const char* tasks = std::getenv("SLURM_STEP_NUM_TASKS"); tasks != nullptr && std::atol(tasks) > 1) {
      fail(
          "srun started {} tasks but gave them no PMI to find each other (no PMIX_RANK or PMI_SIZE): start titan "
          "with `srun --mpi=pmix` (see `srun --mpi=list`; docs/cluster.md)",
          tasks);
    }
    node_names_ = {this_node_name()};
    node_of_rank_ = {0};
    group_ = std::make_shared<LocalProcessGroup>("world");
    return;
  }
  // Waiting ranks yield their core instead of spinning: ranks often share cores with compute threads.
  setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
  TITAN_CHECK(provided >= MPI_THREAD_MULTIPLE, "MPI provides thread level {}, titan needs MPI_THREAD_MULTIPLE",
              provided);
  launched_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  find_nodes();
  auto* startup = new MPI_Comm;
  MPI_Comm_dup(MPI_COMM_WORLD, startup);
  startup_comm_ = startup;
  census_ = std::make_unique<StallCensus>();
  group_ = std::make_shared<MpiProcessGroup>(MPI_COMM_WORLD, "world", timeout_seconds);
}

void World::find_nodes() {
  constexpr int kNameBytes = 256;
  std::string mine = this_node_name();
  mine.resize(kNameBytes - 1);  // fixed-size records, NUL-padded
  std::vector<char> all(static_cast<size_t>(size_) * kNameBytes, '\0');
  MPI_Allgather(mine.c_str(), kNameBytes, MPI_CHAR, all.data(), kNameBytes, MPI_CHAR, MPI_COMM_WORLD);
  node_of_rank_.assign(static_cast<size_t>(size_), 0);
  for (int r = 0; r < size_; ++r) {
    const std::string name(&all[static_cast<size_t>(r) * kNameBytes]);
    size_t index = 0;
    while (index < node_names_.size() && node_names_[index] != name) ++index;
    if (index == node_names_.size()) node_names_.push_back(name);
    node_of_rank_[static_cast<size_t>(r)] = static_cast<int>(index);
  }
  node_ = node_of_rank_[static_cast<size_t>(rank_)];
  local_rank_ = local_size_ = 0;
  for (int r = 0; r < size_; ++r) {
    if (node_of_rank_[static_cast<size_t>(r)] != node_) continue;
    if (r < rank_) ++local_rank_;
    ++local_size_;
  }
}

World::~World() {
  group_.reset();
  census_.reset();  // its thread talks MPI: it stops before MPI ends
  delete static_cast<MPI_Comm*>(startup_comm_);
  if (launched_) MPI_Finalize();
}

bool World::every_rank_failed_startup(double timeout_seconds) {
  if (!launched_) return true;
  int failed = 1, failed_ranks = 0;
  MPI_Request request;
  MPI_Iallreduce(&failed, &failed_ranks, 1, MPI_INT, MPI_SUM, *static_cast<MPI_Comm*>(startup_comm_), &request);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  int done = 0;
  while (!done && std::chrono::steady_clock::now() < deadline) {
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return done && failed_ranks == size_;  // undone: the request stays pending, and the job is aborted
}

std::shared_ptr<ProcessGroup> make_process_group(const std::string& backend, int device) {
  World& world = World::instance();
  if (backend == "mpi") return world.group();
  if (backend == "nccl") {
#ifdef TITAN_WITH_CUDA
    return make_nccl_process_group(world.group(), device < 0 ? world.local_rank() : device, "world",
                                   world.timeout_seconds());
#else
    fail(
        "process group backend 'nccl' needs a CUDA build of titan (this one was built without the CUDA toolkit); "
        "use 'mpi' for CPU tensors");
#endif
  }
  fail("unknown process group backend '{}' (expected 'mpi' or 'nccl')", backend);
}

void abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

}  // namespace titan::comm
