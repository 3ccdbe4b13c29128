#include "titan/train/metrics.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "titan/core/allocator.h"
#include "titan/core/error.h"
#include "titan/core/units.h"
#include "titan/train/tensorboard_writer.h"

namespace titan::train {

MetricsLogger::MetricsLogger(const std::string& jsonl_path, bool progress, bool stop_on_write_error,
                             const std::string& tensorboard_folder)
    : jsonl_path_(jsonl_path), progress_(progress), stop_on_write_error_(stop_on_write_error) {
  if (!tensorboard_folder.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(tensorboard_folder);
  if (jsonl_path.empty()) return;
  jsonl_fd_ = ::open(jsonl_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  TITAN_CHECK(jsonl_fd_ >= 0, "cannot open metrics file '{}': {}", jsonl_path, std::strerror(errno));
}

MetricsLogger::~MetricsLogger() {
  if (jsonl_fd_ >= 0) ::close(jsonl_fd_);
}

void MetricsLogger::append_record(const std::string& line) {
  const off_t size_before = ::lseek(jsonl_fd_, 0, SEEK_END);
  size_t done = 0;
  int error = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(jsonl_fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      error = n < 0 ? errno : ENOSPC;
      break;
    }
    done += static_cast<size_t>(n);
  }
  if (error == 0) return;
  // Half a record would make the file unreadable as JSON lines: cut it off (nothing more to do if that fails too).
  if (size_before >= 0 && done > 0) {
    [[maybe_unused]] const int cut = ::ftruncate(jsonl_fd_, size_before);
  }
  TITAN_CHECK(!stop_on_write_error_, "cannot write metrics to '{}': {} (metrics.stop_on_write_error is set)",
              jsonl_path_, std::strerror(error));
  if (warned_) return;
  warned_ = true;
  std::fprintf(stderr,
               "titan: warning: cannot write metrics to '%s': %s. Training goes on with metrics on the console only "
               "(records that cannot be written are dropped; metrics.stop_on_write_error = true stops instead)\n",
               jsonl_path_.c_str(), std::strerror(error));
}

namespace {
std::string duration(double seconds) {
  const auto total = static_cast<int64_t>(seconds);
  if (total >= 3600) return fmt::format("{}h{:02}m", total / 3600, total % 3600 / 60);
  return fmt::format("{}m{:02}s", total / 60, total % 60);
}
}  // namespace

std::string MetricsLogger::format_line(const StepMetrics& m, bool progress) {
  std::string line = fmt::format(
      "step {:>5}/{}  loss {:7.4f}  grad_norm {:7.4f}  lr {:.3e}  mem {:.2f}/{:.2f}GiB ({:.1f}%)  tps {:.0f}  "
      "tflops {:.3f}  mfu {:.1f}%  data {:.1f}%  trained {}",
      m.step, m.total_steps, m.loss, m.grad_norm, m.lr, m.peak_memory_gib, m.reserved_memory_gib, m.memory_percent,
      m.tokens_per_second, m.tflops, m.mfu_percent, m.step_seconds > 0 ? 100.0 * m.data_seconds / m.step_seconds : 0,
      m.trained_tokens);
  if (m.comm_busy_seconds > 0) {
    line += fmt::format("  comm {:.1f}% exposed {:.1f}%", 100.0 * m.comm_busy_seconds / m.step_seconds,
                        100.0 * m.comm_exposed_seconds / m.step_seconds);
  }
  // Retries mean the device ran out and the cache was flushed: a sign of fragmentation or a too-large batch.
  if (m.alloc_retries > 0) line += fmt::format("  alloc_retries {}", m.alloc_retries);
  if (m.aux_loss) line += fmt::format("  aux {:.4f}", *m.aux_loss);
  if (m.expert_load_mean) {
    line += fmt::format("  load {:.2f} (worst {:.2f} @ layer {})", *m.expert_load_mean, *m.expert_load_worst,
                        m.expert_load_worst_layer);
  }
  if (m.pipeline_bubble) line += fmt::format("  bubble {:.1f}%", 100.0 * *m.pipeline_bubble);
  if (!m.context_parallel_rank_wait_seconds.empty()) {
    const auto& waits = m.context_parallel_rank_wait_seconds;
    line += fmt::format("  kv_wait {:.1f}%", 100.0 * *std::max_element(waits.begin(), waits.end()) / m.step_seconds);
  }
  if (m.validation_loss) line += fmt::format("  val_loss {:.4f}", *m.validation_loss);
  if (m.checkpoint_stall_seconds > 0) line += fmt::format("  ckpt_stall {:.3f}s", m.checkpoint_stall_seconds);
  if (m.skipped_steps > 0) line += fmt::format("  skipped {}", m.skipped_steps);
  if (progress && m.step > 0) {
    const double eta = m.elapsed_seconds / static_cast<double>(m.step) * static_cast<double>(m.total_steps - m.step);
    line += fmt::format("  [{} elapsed, eta {}]", duration(m.elapsed_seconds), duration(eta));
  }
  return line;
}

void MetricsLogger::log(const StepMetrics& m) {
  std::printf("%s\n", format_line(m, progress_).c_str());
  std::fflush(stdout);
  if (jsonl_fd_ < 0 && !tensorboard_) return;
  const nlohmann::json record = metrics_record(m);
  if (jsonl_fd_ >= 0) append_record(record.dump() + "\n");
  if (!tensorboard_) return;
  try {
    tensorboard_->add_scalars(m.step, record);
  } catch (const Error& error) {
    // The same policy as metrics.jsonl: a full disk costs the scalars, not the run, unless asked otherwise.
    if (stop_on_write_error_) throw;
    std::fprintf(stderr,
                 "titan: warning: %s. Training goes on without TensorBoard scalars "
                 "(metrics.stop_on_write_error = true stops instead)\n",
                 error.what());
    tensorboard_.reset();
  }
}

void MetricsLogger::log_record(const nlohmann::json& record, int64_t step) {
  if (jsonl_fd_ >= 0) append_record(record.dump() + "\n");
  if (!tensorboard_) return;
  try {
    tensorboard_->add_scalars(step, record_scalars(record));
  } catch (const Error& error) {
    if (stop_on_write_error_) throw;
    std::fprintf(stderr, "titan: warning: %s. The goodput record is not in TensorBoard\n", error.what());
  }
}

void MetricsLogger::log_image(int64_t step, const std::string& tag, int64_t height, int64_t width,
                              std::string_view png) {
  if (!tensorboard_) return;
  try {
    tensorboard_->add_image(step, tag, height, width, png);
  } catch (const Error& error) {
    if (stop_on_write_error_) throw;
    std::fprintf(stderr, "titan: warning: %s. The image %s is not in TensorBoard\n", error.what(), tag.c_str());
  }
}

nlohmann::json record_scalars(const nlohmann::json& record) {
  nlohmann::json scalars = nlohmann::json::object();
  for (const auto& [name, fields] : record.items()) {
    if (!fields.is_object()) continue;
    for (const auto& [key, value] : fields.items()) {
      if (value.is_number()) scalars[name + "/" + key] = value;
      // TensorBoard scalars are numbers: which tier a restart used becomes a tag of its own.
      if (value.is_string() && !value.get<std::string>().empty())
        scalars[name + "/" + key + "/" + value.get<std::string>()] = 1;
    }
  }
  return scalars;
}

nlohmann::json metrics_record(const StepMetrics& m) {
  nlohmann::json record{{"step", m.step},
                        {"loss", m.loss},
                        {"grad_norm", m.grad_norm},
                        {"lr", m.lr},
                        {"step_seconds", m.step_seconds},
                        {"host_seconds", m.host_seconds},
                        {"data_seconds", m.data_seconds},
                        {"data_percent", m.step_seconds > 0 ? 100.0 * m.data_seconds / m.step_seconds : 0.0},
                        {"tokens", m.tokens},
                        {"trained_tokens", m.trained_tokens},
                        {"tokens_per_second", m.tokens_per_second},
                        {"tflops", m.tflops},
                        {"mfu_percent", m.mfu_percent},
                        {"peak_memory_gib", m.peak_memory_gib},
                        {"step_memory_gib", m.step_memory_gib},
                        {"reserved_memory_gib", m.reserved_memory_gib},
                        {"alloc_retries", m.alloc_retries},
                        {"memory_percent", m.memory_percent},
                        {"elapsed_seconds", m.elapsed_seconds},
                        {"comm_busy_seconds", m.comm_busy_seconds},
                        {"comm_exposed_seconds", m.comm_exposed_seconds},
                        {"comm_intra_node_collectives", m.comm_intra_node_collectives},
                        {"comm_intra_node_bytes", m.comm_intra_node_bytes},
                        {"comm_intra_node_seconds", m.comm_intra_node_seconds},
                        {"comm_cross_node_collectives", m.comm_cross_node_collectives},
                        {"comm_cross_node_bytes", m.comm_cross_node_bytes},
                        {"comm_cross_node_seconds", m.comm_cross_node_seconds},
                        {"checkpoint_stall_seconds", m.checkpoint_stall_seconds}};
  if (m.fast_tier_stall_seconds > 0) record["fast_tier_stall_seconds"] = m.fast_tier_stall_seconds;
  if (m.fast_tier_replica_seconds > 0) record["fast_tier_replica_seconds"] = m.fast_tier_replica_seconds;
  if (m.validation_loss) record["validation_loss"] = *m.validation_loss;
  if (m.replicas_live) {
    record["replicas_live"] = *m.replicas_live;
    record["ft_quorum_id"] = *m.ft_quorum_id;
    record["ft_steps_recovered"] = *m.ft_steps_recovered;
    record["ft_recover_seconds"] = *m.ft_recover_seconds;
    record["ft_quorum_seconds"] = *m.ft_quorum_seconds;
    record["ft_retries"] = *m.ft_retries;
    if (m.ft_commit_seconds) record["ft_commit_seconds"] = *m.ft_commit_seconds;
  }
  if (m.skipped_steps > 0) record["skipped_nonfinite_steps"] = m.skipped_steps;
  if (m.aux_loss) record["aux_loss"] = *m.aux_loss;
  if (m.expert_load_mean) {
    record["expert_load_max_over_mean"] = *m.expert_load_mean;
    record["expert_load_worst"] = *m.expert_load_worst;
    record["expert_load_worst_layer"] = m.expert_load_worst_layer;
  }
  if (m.pipeline_bubble) {
    record["pipeline_bubble"] = *m.pipeline_bubble;
    record["pipeline_rank_bubble"] = m.pipeline_rank_bubble;
    record["pipeline_rank_peak_memory_gib"] = m.pipeline_rank_peak_memory_gib;
  }
  if (!m.context_parallel_rank_wait_seconds.empty()) {
    record["context_parallel_rank_attention_seconds"] = m.context_parallel_rank_attention_seconds;
    record["context_parallel_rank_wait_seconds"] = m.context_parallel_rank_wait_seconds;
    record["context_parallel_rank_peak_memory_gib"] = m.context_parallel_rank_peak_memory_gib;
    record["context_parallel_rank_step_memory_gib"] = m.context_parallel_rank_step_memory_gib;
  }
  return record;
}

double device_memory_gib(Device device) {
  const int64_t capacity = device.is_cpu() ? 0 : memory_stats(device.type).capacity_bytes;
  if (capacity > 0) return static_cast<double>(capacity) / kBytesPerGiB;
  const long pages = sysconf(_SC_PHYS_PAGES), page_size = sysconf(_SC_PAGE_SIZE);
  return static_cast<double>(pages) * static_cast<double>(page_size) / kBytesPerGiB;
}

}  // namespace titan::train
