// How the world's ranks are arranged for parallelism. ParallelDims resolves
// the degrees of pp, dp_replicate, dp_shard, cp and tp (one of them may be -1:
// "the rest of the world") and checks their product is the world size; the
// DeviceMesh lays ranks out row-major over [pp, dp_replicate, dp_shard, cp, tp]
// (tp fastest, so tensor-parallel peers are neighbours) and owns one process
// group per named dim and per flattened view (dp, dp_shard_cp, dp_cp).
//
// Expert parallelism borrows its ranks from dp_shard, as TorchTitan does:
// dp_shard splits into [dp_shard_mod_ep, ep] (ep faster), so the ep ranks
// that exchange tokens hold different experts and the dp_shard_mod_ep ranks
// that hold the same experts shard them with FSDP.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "titan/comm/process_group.h"

namespace titan::comm {

struct ParallelDims {
  int64_t pp = 1;
  int64_t dp_replicate = 1;
  int64_t dp_shard = -1;
  int64_t cp = 1;
  int64_t tp = 1;
  int64_t ep = 1;  // expert parallelism: a factor of dp_shard, not extra ranks

  // Fills a -1 degree and checks the product equals `world`; errors name every degree.
  ParallelDims resolved(int64_t world) const;
  int64_t dp() const { return dp_replicate * dp_shard; }
  bool fsdp_enabled() const { return dp_shard * cp > 1; }  // context parallel ranks shard too
  bool tp_enabled() const { return tp > 1; }
};

class DeviceMesh {
 public:
  // Collective over `world`: every rank must construct the mesh with the same dims.
  DeviceMesh(const ParallelDims& dims, std::shared_ptr<ProcessGroup> world);

  const ParallelDims& dims() const { return dims_; }
  // "pp", "dp_replicate", "dp_shard", "cp", "tp", "ep", "dp_shard_mod_ep" (dp_shard / ep), or the
  // flattened "dp" (dp_replicate x dp_shard), "dp_shard_cp" (FSDP's ranks under context
  // parallelism), "dp_shard_mod_ep_cp" (its experts'), "dp_cp", "world".
  const std::shared_ptr<ProcessGroup>& group(const std::string& dim) const;
  // This rank's index along a dim (or flattened view).
  int coordinate(const std::string& dim) const { return group(dim)->rank(); }
  int size(const std::string& dim) const { return group(dim)->size(); }

 private:
  ParallelDims dims_;
  std::map<std::string, std::shared_ptr<ProcessGroup>> groups_;
};

}  // namespace titan::comm
