#include "titan/train/fault_tolerance.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "titan/comm/gloo_process_group.h"
#include "titan/comm/gloo_store.h"
#include "titan/comm/lighthouse_client.h"
#include "titan/core/copy.h"
#include "titan/core/units.h"

namespace titan::train {

namespace {

using comm::MeshDim;

// Rank 0's text to every rank of this group (the group is alive: MPI is fine here).
std::string ft_share_text(comm::ProcessGroup& group, const std::string& text) {
  Tensor length = Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(text.size())}, {1});
  group.broadcast(length, 0)->wait();
  const int64_t size = length.data<int64_t>()[0];
  std::vector<int64_t> chars(static_cast<size_t>(size));
  if (group.rank() == 0) {
    for (int64_t i = 0; i < size; ++i) chars[static_cast<size_t>(i)] = static_cast<unsigned char>(text[i]);
  }
  Tensor data = Tensor::from_vector(chars, {size});
  if (size > 0) group.broadcast(data, 0)->wait();
  std::string out(static_cast<size_t>(size), '\0');
  for (int64_t i = 0; i < size; ++i) out[static_cast<size_t>(i)] = static_cast<char>(data.data<int64_t>()[i]);
  return out;
}

// `tensor` (any device) from member `root` of the Gloo group to every member.
void ft_broadcast_tensor(comm::GlooProcessGroup& gloo, const Tensor& tensor, int root) {
  if (tensor.device().is_cpu() && tensor.is_contiguous()) {
    gloo.broadcast(tensor, root);
    return;
  }
  const Tensor host = tensor.to(Device::cpu()).contiguous();
  gloo.broadcast(host, root);
  titan::copy_(tensor, host);
}

// This rank's gradients in the model's parameter order (every group has the same layout).
std::vector<Tensor> ft_gradients(models::Decoder& model) {
  std::vector<Tensor> grads;
  for (auto& [name, parameter] : model.named_parameters()) {
    const Tensor grad = parameter->data.grad();
    if (grad.defined()) grads.push_back(grad);
  }
  return grads;
}

}  // namespace

FaultTolerance::FaultTolerance(const JobConfig& config, const comm::DeviceMesh& mesh, Parts parts)
    : config_(config), section_(config.fault_tolerance), mesh_(mesh), parts_(parts) {
  rank_ = mesh_.coordinate(MeshDim::world);
  comm::ProcessGroup& world = *mesh_.group(MeshDim::world);
  std::string address;
  if (rank_ == 0) {
    const char* env = std::getenv("TORCHFT_LIGHTHOUSE");
    address = env != nullptr ? env : "";
  }
  address_ = ft_share_text(world, address);
  TITAN_CHECK(!address_.empty(),
              "fault_tolerance.enable: set TORCHFT_LIGHTHOUSE=host:port to where `titan lighthouse` listens "
              "(docs/fault-tolerance.md)");
  if (rank_ == 0) {
    const auto timeout_ms = static_cast<int64_t>(config_.comm.timeout_seconds * 1000.0);
    client_ = std::make_unique<comm::LighthouseClient>(address_, section_.replica_id, timeout_ms);
    std::printf("titan: replica group %lld of %lld (min_replica_size %lld), lighthouse %s\n",
                static_cast<long long>(section_.replica_id), static_cast<long long>(section_.group_size),
                static_cast<long long>(section_.min_replica_size), address_.c_str());
    std::fflush(stdout);
  }
}

FaultTolerance::~FaultTolerance() = default;

nlohmann::json FaultTolerance::snapshot() const {
  nlohmann::json state{{"step", parts_.step},
                       {"optimizer_steps", parts_.optimizer.steps_taken()},
                       {"rng_seed", parts_.generator.seed()},
                       {"rng_offset", parts_.generator.offset()}};
  if (parts_.loader != nullptr) state["dataloader"] = parts_.loader->state_dict();
  return state;
}

void FaultTolerance::begin_step() {
  steps_recovered_ = retries_ = 0;
  recover_seconds_ = quorum_seconds_ = commit_seconds_ = 0.0;
  snapshot_ = snapshot();
  form_quorum(parts_.step, /*fresh=*/false);
}

void FaultTolerance::form_quorum(int64_t committed, bool fresh) {
  const auto start = SteadyClock::now();
  comm::ProcessGroup& world = *mesh_.group(MeshDim::world);
  std::string text;
  if (rank_ == 0) text = client_->quorum(committed, section_.min_replica_size, fresh).encode();
  quorum_ = comm::Quorum::decode(ft_share_text(world, text));
  const int me = quorum_.index_of(section_.replica_id);
  TITAN_CHECK(me >= 0, "replica group {}: the lighthouse's quorum {} does not hold this group", section_.replica_id,
              quorum_.id);
  if (quorum_.id != gloo_quorum_id_) {
    gloo_.reset();
    // Each group-local rank has its own group: the same rank of every live replica group.
    comm::LighthouseStore store(address_, fmt::format("q{}/r{}/", quorum_.id, rank_),
                                section_.process_group_timeout_ms);
    gloo_ = std::make_shared<comm::GlooProcessGroup>(store, me, static_cast<int>(quorum_.members.size()),
                                                     std::chrono::milliseconds(section_.process_group_timeout_ms),
                                                     fmt::format("fault_tolerance.q{}.r{}", quorum_.id, rank_));
    gloo_->set_spans_nodes(true);
    gloo_quorum_id_ = quorum_.id;
    if (rank_ == 0) {
      std::printf("titan: replica group %lld: quorum %lld of %zu group(s) at step %lld\n",
                  static_cast<long long>(section_.replica_id), static_cast<long long>(quorum_.id),
                  quorum_.members.size(), static_cast<long long>(quorum_.max_step()));
      std::fflush(stdout);
    }
  }
  quorum_seconds_ += seconds_since(start);
  for (const comm::QuorumMember& member : quorum_.members) {
    if (member.step < quorum_.max_step()) {
      recover();
      break;
    }
  }
}

// Every member takes part: the first group holding the newest step sends, the
// others receive (those already current get the same bytes back).
void FaultTolerance::recover() {
  const auto start = SteadyClock::now();
  AllowHostReadsScope host_reads;
  const int source = quorum_.recovery_source();
  const int me = quorum_.index_of(section_.replica_id);
  const bool behind = quorum_.members[static_cast<size_t>(me)].step < quorum_.max_step();
  if (rank_ == 0 && behind) {
    std::printf(
        "titan: replica group %lld: at step %lld, behind the quorum's step %lld: fetching the state from "
        "replica group %lld\n",
        static_cast<long long>(section_.replica_id),
        static_cast<long long>(quorum_.members[static_cast<size_t>(me)].step),
        static_cast<long long>(quorum_.max_step()),
        static_cast<long long>(quorum_.members[static_cast<size_t>(source)].replica_id));
    std::fflush(stdout);
  }
  for (auto& [name, parameter] : parts_.model.named_parameters()) ft_broadcast_tensor(*gloo_, parameter->data, source);
  for (const auto& [name, moment] : parts_.optimizer.state_tensors()) ft_broadcast_tensor(*gloo_, moment, source);
  // The scalars as JSON text: its length, then its bytes.
  const std::string text = snapshot_.dump();
  Tensor length = Tensor::from_vector(std::vector<int64_t>{static_cast<int64_t>(text.size())}, {1});
  gloo_->broadcast(length, source);
  Tensor bytes = Tensor::zeros({length.data<int64_t>()[0]}, DType::u8);
  if (me == source) std::memcpy(bytes.data_ptr(), text.data(), text.size());
  gloo_->broadcast(bytes, source);
  if (behind) {
    const nlohmann::json state =
        nlohmann::json::parse(std::string(static_cast<const char*>(bytes.data_ptr()), bytes.nbytes()));
    const int64_t step = state.at("step").get<int64_t>();
    steps_recovered_ += step - parts_.step;
    parts_.step = step;
    parts_.optimizer.set_steps_taken(state.at("optimizer_steps").get<int64_t>());
    parts_.generator.set_state(state.at("rng_seed").get<uint64_t>(), state.at("rng_offset").get<uint64_t>());
    if (parts_.loader != nullptr && state.contains("dataloader")) parts_.loader->load_state_dict(state["dataloader"]);
    snapshot_ = snapshot();
  }
  for (comm::QuorumMember& member : quorum_.members) member.step = quorum_.max_step();
  recover_seconds_ += seconds_since(start);
}

void FaultTolerance::average_gradients() {
  // Gradients go through host memory: Gloo here moves host buffers over TCP.
  AllowHostReadsScope host_reads;
  const std::vector<Tensor> grads = ft_gradients(parts_.model);
  int64_t elements = 0;
  for (const Tensor& grad : grads) elements += grad.numel();
  std::vector<float> flat;
  flat.reserve(static_cast<size_t>(elements));
  for (const Tensor& grad : grads) {
    const std::vector<float> values = grad.to_floats();
    flat.insert(flat.end(), values.begin(), values.end());
  }
  comm::ProcessGroup& world = *mesh_.group(MeshDim::world);
  while (true) {
    // A fresh copy each try: a failed all-reduce may have left partial sums behind.
    const Tensor sums = Tensor::from_floats(flat, {static_cast<int64_t>(flat.size())});
    std::string lost;
    try {
      gloo_->all_reduce(sums, comm::ReduceOp::avg);
    } catch (const comm::GlooPeerLost& error) {
      lost = error.what();
    }
    // The whole group goes on, or the whole group re-forms the quorum: its ranks' shards must agree.
    const double failures = comm::all_reduce_scalar(world, lost.empty() ? 0.0 : 1.0, comm::ReduceOp::max);
    // And every group: rank 0 votes for the group at the lighthouse, which
    // commits only if every member of the quorum succeeded (a peer lost in the
    // last exchange may have left some members with the full average).
    // Test hook (tests/integration/fault_tolerance_test.cpp): the group dies
    // after a successful all-reduce, before its vote.
    if (const char* at = std::getenv("TITAN_TEST_FT_DIE_BEFORE_VOTE");
        at != nullptr && rank_ == 0 && failures == 0.0 && std::atoll(at) == parts_.step) {
      std::fflush(stdout);
      std::_Exit(137);
    }
    const auto vote_start = SteadyClock::now();
    double abort = 0.0;
    if (rank_ == 0) {
      abort = client_->should_commit(quorum_.id, parts_.step, failures == 0.0, section_.process_group_timeout_ms) ? 0.0
                                                                                                                  : 1.0;
    }
    abort = comm::all_reduce_scalar(world, abort, comm::ReduceOp::max);
    commit_seconds_ += seconds_since(vote_start);
    if (abort == 0.0) {
      int64_t offset = 0;
      for (const Tensor& grad : grads) {
        const std::span<const float> part(sums.data<float>() + offset, static_cast<size_t>(grad.numel()));
        titan::copy_(grad, Tensor::from_floats(part, grad.shape(), grad.dtype()).to(grad.device()));
        offset += grad.numel();
      }
      return;
    }
    ++retries_;
    if (lost.empty() && failures == 0.0 && rank_ == 0) {
      std::printf(
          "titan: replica group %lld: the quorum did not commit step %lld (a peer failed or died before its vote); "
          "averaging again in a fresh quorum\n",
          static_cast<long long>(section_.replica_id), static_cast<long long>(parts_.step));
      std::fflush(stdout);
    }
    if (!lost.empty()) {
      std::printf(
          "titan: replica group %lld rank %d: a peer group was lost during step %lld (%s); re-forming the "
          "quorum\n",
          static_cast<long long>(section_.replica_id), rank_, static_cast<long long>(parts_.step), lost.c_str());
      std::fflush(stdout);
    }
    // The step is not committed yet: join with the steps before it.
    form_quorum(parts_.step - 1, /*fresh=*/true);
  }
}

void FaultTolerance::report(StepMetrics& metrics) {
  metrics.replicas_live = static_cast<int64_t>(quorum_.members.size());
  metrics.ft_quorum_id = quorum_.id;
  metrics.ft_steps_recovered = steps_recovered_;
  metrics.ft_recover_seconds = recover_seconds_;
  metrics.ft_quorum_seconds = quorum_seconds_;
  metrics.ft_retries = retries_;
  metrics.ft_commit_seconds = commit_seconds_;
}

}  // namespace titan::train
