#include "titan/distributed/world.h"

#include <mpi.h>

#include <cstdlib>

#include "titan/distributed/local_process_group.h"
#include "titan/distributed/mpi_process_group.h"

namespace titan::distributed {

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

World::World(double timeout_seconds) {
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
  MPI_Comm_free(&node);
  group_ = std::make_shared<MpiProcessGroup>(MPI_COMM_WORLD, "world", timeout_seconds);
}

World::~World() {
  group_.reset();
  if (launched_) MPI_Finalize();
}

}  // namespace titan::distributed
