#include "titan/train/job_setup.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "titan/comm/fake_process_group.h"
#include "titan/comm/flight_recorder.h"
#include "titan/comm/routed_process_group.h"
#include "titan/comm/world.h"
#include "titan/core/copy.h"
#include "titan/train/config_loader.h"

namespace titan::train {

using comm::MeshDim;

Device training_device(const JobConfig& config) {
  const Device device = Device::parse(config.training.device);
  TITAN_CHECK(!device.is_meta(), "training.device 'meta': meta tensors hold no data to train");
  TITAN_CHECK(device.is_cpu() || titan::copy_kernels.has_kernel(device.type),
              "training.device '{}': no CUDA device is visible to this process, or titan was built without the "
              "CUDA toolkit",
              config.training.device);
  TITAN_CHECK(!device.is_cuda() || device.index == 0,
              "training.device '{}': a process trains on cuda:0; choose its GPU with CUDA_VISIBLE_DEVICES",
              config.training.device);
  return device;
}

bool is_rehearsal(const JobConfig& config) { return config.comm.mode == "fake_backend"; }

bool reports_for_job(const JobConfig& config, const comm::DeviceMesh& mesh) {
  return is_rehearsal(config) || mesh.coordinate(MeshDim::world) == 0;
}

std::unique_ptr<comm::DeviceMesh> build_device_mesh(const JobConfig& config, Device device) {
  const ParallelismSection& p = config.parallelism;
  comm::World& world = comm::World::instance(config.comm.timeout_seconds);
  comm::FlightRecorder::instance().configure(
      config.comm.trace_buf_size,
      (std::filesystem::path(config.job.dump_folder) / config.comm.save_traces_folder).string());
  const bool rehearsal = is_rehearsal(config);
  TITAN_CHECK(!rehearsal || world.size() == 1,
              "comm.mode = fake_backend: one process plays one rank of the job; start it without a launcher (this "
              "job has {} processes)",
              world.size());
  const int64_t ranks = rehearsal ? config.comm.fake_world_size : world.size();
  const bool multi_gpu = device.is_cuda() && ranks > 1;
  TITAN_CHECK(!multi_gpu || p.tensor_parallel_degree == 1,
              "parallelism.tensor_parallel_degree {} on CUDA: tensor parallelism runs on the CPU backend only so far "
              "(its vocabulary-parallel loss combines on the host)",
              p.tensor_parallel_degree);
  TITAN_CHECK(!multi_gpu || p.pipeline_parallel_degree == 1,
              "parallelism.pipeline_parallel_degree {} on CUDA: pipeline parallelism runs on the CPU backend only so "
              "far (NCCL matches sends and receives in issue order, without tags, which the pipeline runner's "
              "early-posted receives rely on)",
              p.pipeline_parallel_degree);
  TITAN_CHECK(!multi_gpu || p.context_parallel_degree == 1 || p.context_parallel_rotate_method == "allgather",
              "parallelism.context_parallel_rotate_method alltoall on CUDA: the ring's point-to-point passes run on "
              "the CPU backend only so far (NCCL matches sends and receives in issue order, and every rank receives "
              "before it sends); use allgather",
              p.context_parallel_rotate_method);
  TITAN_CHECK(!multi_gpu || !config.training.graph_capture,
              "training.graph_capture with {} processes: a recorded step cannot wait for NCCL from the host; "
              "capture runs single-GPU jobs only so far",
              ranks);
  comm::ParallelDims dims{p.pipeline_parallel_degree, p.data_parallel_replicate_degree, p.data_parallel_shard_degree,
                          p.context_parallel_degree,  p.tensor_parallel_degree,         p.expert_parallel_degree};
  // The nodes the ranks run on (a rehearsal's one process knows none: one node).
  std::vector<int> node_of_rank;
  if (!rehearsal) {
    node_of_rank = world.node_of_rank();
    std::string note;
    dims = dims.resolved_on_nodes(node_of_rank, &note);  // HSDP by default across nodes
    if (!note.empty() && world.rank() == 0) std::printf("titan: %s\n", note.c_str());
  }
  std::shared_ptr<comm::ProcessGroup> root = world.group();
  if (rehearsal) {
    root = std::make_shared<comm::FakeProcessGroup>(static_cast<int>(config.comm.fake_rank),
                                                    static_cast<int>(config.comm.fake_world_size));
  } else if (multi_gpu) {
    root = std::make_shared<comm::RoutedProcessGroup>(world.group(), comm::make_process_group("nccl", 0));
  }
  return std::make_unique<comm::DeviceMesh>(dims, root, std::move(node_of_rank));
}

std::unique_ptr<data::DataLoader> build_data_loader(const JobConfig& config, const comm::DeviceMesh& mesh) {
  data::DataLoaderConfig data;
  data.paths = {config.training.dataset_path};
  data.tokenizer = config.model.tokenizer_path;
  data.seq_len = config.training.seq_len;
  data.local_batch = config.training.local_batch_size;
  data.seed = static_cast<uint64_t>(config.training.seed);
  data.validation_fraction = config.validation.enable ? config.validation.split : 0.0;
  data.document_masking = config.model.document_masking;
  data.dp_rank = mesh.coordinate(MeshDim::dp);
  data.dp_world = mesh.size(MeshDim::dp);
  if (config.fault_tolerance.enable) {
    // TorchTitan's sharding: replica groups read disjoint parts of each global batch (dp x group_size ranks).
    data.dp_rank += config.fault_tolerance.replica_id * data.dp_world;
    data.dp_world *= config.fault_tolerance.group_size;
  }
  data.chat = chat_options(config);  // chat data: rendered, packed whole, masked (data/chat_dataset.h)
  return std::make_unique<data::DataLoader>(data);
}

int64_t micro_batches_per_step(const JobConfig& config, const comm::DeviceMesh& mesh) {
  const int64_t local = config.training.local_batch_size * mesh.size(MeshDim::dp);
  const int64_t global = config.training.global_batch_size > 0 ? config.training.global_batch_size : local;
  TITAN_CHECK(global % local == 0,
              "training.global_batch_size {} is not a multiple of local_batch_size x data-parallel ranks = {}", global,
              local);
  return global / local;
}

std::unique_ptr<optim::AdamW> build_optimizer(const OptimizerSection& section, nn::Module& model) {
  std::vector<std::pair<std::string, Tensor>> named;
  for (auto& [name, parameter] : model.named_parameters()) {
    if (parameter->data.requires_grad()) named.emplace_back(name, parameter->data);
  }
  const optim::AdamWOptions options{section.beta1,        section.beta2,           section.eps,
                                    section.weight_decay, section.no_weight_decay, parse_dtype(section.state_dtype)};
  return std::make_unique<optim::AdamW>(std::move(named), options);
}

optim::LrSchedule build_lr_schedule(const JobConfig& config, bool reports) {
  const LrSchedulerSection& section = config.lr_scheduler;
  const int64_t total = section.total_steps > 0 ? section.total_steps : config.training.steps;
  const char* total_key = section.total_steps > 0 ? "lr_scheduler.total_steps" : "training.steps";
  optim::LrSchedule schedule{std::min(section.warmup_steps, total), total, section.decay_ratio, section.decay_type,
                             section.min_lr_factor};
  if (reports && schedule.warmup_steps < section.warmup_steps) {
    std::printf("titan: warning: lr_scheduler.warmup_steps %lld exceeds %s %lld: warming up over %lld\n",
                static_cast<long long>(section.warmup_steps), total_key, static_cast<long long>(total),
                static_cast<long long>(schedule.warmup_steps));
  }
  if (reports && schedule.decay_steps() < schedule.requested_decay_steps()) {
    std::printf(
        "titan: warning: lr_scheduler.warmup_steps %lld + decay_ratio %g x %lld steps exceed %s: decaying "
        "over the %lld steps after warmup\n",
        static_cast<long long>(schedule.warmup_steps), section.decay_ratio, static_cast<long long>(total), total_key,
        static_cast<long long>(schedule.decay_steps()));
  }
  return schedule;
}

}  // namespace titan::train
