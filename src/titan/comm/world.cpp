#include "titan/comm/world.h"

#include <mpi.h>

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

World::World(double timeout_seconds) : timeout_seconds_(timeout_seconds) {
  if (!started_by_launcher()) {
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
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank_);
  MPI_Comm_size(node, &local_size_);
  MPI_Comm_free(&node);
  auto* startup = new MPI_Comm;
  MPI_Comm_dup(MPI_COMM_WORLD, startup);
  startup_comm_ = startup;
  census_ = std::make_unique<StallCensus>();
  group_ = std::make_shared<MpiProcessGroup>(MPI_COMM_WORLD, "world", timeout_seconds);
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
