#include "titan/train/dcp_training_state.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <set>

#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/checkpoint_folder.h"
#include "titan/checkpoint/chunk_file.h"
#include "titan/checkpoint/dcp_folder.h"
#include "titan/checkpoint/pickle_writer.h"
#include "titan/checkpoint/torch_archive.h"
#include "titan/core/copy.h"
#include "titan/core/error.h"
#include "titan/core/units.h"
#include "titan/data/file_io.h"
#include "titan/train/config_loader.h"
#include "titan/train/dcp_convert.h"
#include "titan/train/job_setup.h"
#include "titan/train/model_export.h"

namespace titan::train {

namespace fs = std::filesystem;

// Unity builds put other files' helpers in this namespace's scope: the bodies
// below live in their own namespace, where its names are found first.
namespace dcp_training_state_detail {

using json = nlohmann::json;

constexpr const char* kStatePrefix = "optimizer.state.";
constexpr const char* kGroupPrefix = "optimizer.param_groups.";
// The per-parameter state PyTorch's Adam and AdamW keep (amsgrad adds max_exp_avg_sq, which titan has not).
const std::set<std::string> kAdamWState = {"exp_avg", "exp_avg_sq", "step"};

bool starts_with(const std::string& text, const std::string& prefix) { return text.rfind(prefix, 0) == 0; }

// ---- writing: Python objects as PyTorch's state dicts hold them ----

std::string pickled_float(double value) { return checkpoint::PickleWriter().floating(value).finish(); }
std::string pickled_int(int64_t value) { return checkpoint::PickleWriter().integer(value).finish(); }
std::string pickled_bool(bool value) { return checkpoint::PickleWriter().boolean(value).finish(); }
std::string pickled_text(const std::string& value) { return checkpoint::PickleWriter().text(value).finish(); }
std::string pickled_float_list(double value) {
  return checkpoint::PickleWriter().empty_list().mark().floating(value).append_items().finish();
}
std::string pickled_float_pair(double first, double second) {
  return checkpoint::PickleWriter().mark().floating(first).floating(second).tuple().finish();
}

// Whether AdamW decays `name` under the job's optimizer.no_weight_decay (optim::AdamW::decays' rule).
bool decays(const OptimizerSection& optimizer, const std::string& name) {
  return std::none_of(optimizer.no_weight_decay.begin(), optimizer.no_weight_decay.end(),
                      [&](const std::string& pattern) { return name.find(pattern) != std::string::npos; });
}

// What AdamW's param_groups hold for parameter `fqn`, as recent PyTorch
// writes them (a superset of older versions' keys: a loader asks only for its
// own version's). TorchTitan's default implementation ("fused") stands for
// titan's fused update. Titan applies no_weight_decay per parameter, so
// weight_decay differs between parameters where TorchTitan's one group has
// one value: a TorchTitan job loading this takes the first parameter's
// (docs/checkpoints.md).
void add_param_group(std::vector<checkpoint::DcpObject>& objects, const std::string& fqn, const JobConfig& config,
                     double lr_now) {
  const OptimizerSection& o = config.optimizer;
  auto add = [&](const char* key, std::string pickle) {
    objects.push_back({dcp_param_group_key(fqn, key), std::move(pickle)});
  };
  add("lr", pickled_float(lr_now));
  add("betas", pickled_float_pair(o.beta1, o.beta2));
  add("eps", pickled_float(o.eps));
  add("weight_decay", pickled_float(decays(o, fqn) ? o.weight_decay : 0.0));
  add("amsgrad", pickled_bool(false));
  add("maximize", pickled_bool(false));
  add("foreach", pickled_bool(false));
  add("capturable", pickled_bool(false));
  add("differentiable", pickled_bool(false));
  add("fused", pickled_bool(true));
  add("decoupled_weight_decay", pickled_bool(true));
  add("initial_lr", pickled_float(o.lr));
}

// LambdaLR.state_dict() after `step` scheduler steps, flattened by DCP: lists
// of floats are one item each; lr_lambdas ([{}] for TorchTitan's
// functools.partial) flattens to nothing. "verbose" is older PyTorch's,
// "_is_initial" newer versions': both written, each version loads its own.
void add_lr_scheduler(std::vector<checkpoint::DcpObject>& objects, int64_t step, double base_lr, double lr_now) {
  objects.push_back({"lr_scheduler.base_lrs", pickled_float_list(base_lr)});
  objects.push_back({"lr_scheduler.last_epoch", pickled_int(step)});
  objects.push_back({"lr_scheduler.verbose", pickled_bool(false)});
  objects.push_back({"lr_scheduler._step_count", pickled_int(step + 1)});
  objects.push_back({"lr_scheduler._is_initial", pickled_bool(false)});
  objects.push_back({"lr_scheduler._get_lr_called_within_step", pickled_bool(false)});
  objects.push_back({"lr_scheduler._last_lr", pickled_float_list(lr_now)});
}

// TorchTitan's ntokens_seen: the labels one rank saw, step after step (train.py
// adds labels.numel() per micro-batch), at the saving job's batch size.
int64_t tokens_seen(const JobConfig& config, const json& state, int64_t step) {
  int64_t dp = 1;
  if (state.contains("mesh"))
    dp = state["mesh"].value("dp_replicate", int64_t{1}) * state["mesh"].value("dp_shard", int64_t{1});
  const int64_t rows_per_rank = config.training.global_batch_size > 0
                                    ? config.training.global_batch_size / std::max<int64_t>(dp, 1)
                                    : config.training.local_batch_size;
  return step * rows_per_rank * config.training.seq_len;
}

// ---- reading: the Python objects of a DCP folder's items ----

class ObjectReader {
 public:
  explicit ObjectReader(const checkpoint::DcpFolderReader& reader)
      : reader_(reader), metadata_((fs::path(reader.folder()) / checkpoint::kDcpMetadataFile).string()) {}
  const std::string& metadata() const { return metadata_; }

  bool has(const std::string& key) const { return reader_.has_object(key) || reader_.has_tensor(key); }

  // An int item (or a one-element tensor holding a whole number: PyTorch's optimizer step).
  int64_t integer(const std::string& key) const {
    if (reader_.has_tensor(key)) {
      const checkpoint::DcpTensorItem& item = reader_.tensor(key);
      TITAN_CHECK(shape_numel(item.size) == 1, "{}: item '{}' is a tensor of {}, not one number", metadata_, key,
                  shape_str(item.size));
      const double value = reader_.read(key).to(DType::f32).item();
      TITAN_CHECK(value >= 0 && value == std::floor(value) && value < 9e15, "{}: item '{}' is {}, not a count of steps",
                  metadata_, key, value);
      return static_cast<int64_t>(value);
    }
    const auto archive = object(key);
    const checkpoint::PickleValue& value = archive->root();
    TITAN_CHECK(value.is(checkpoint::PickleKind::integer), "{}: item '{}' is a {}, not an int", metadata_, key,
                value.describe());
    return value.integer;
  }
  double number(const std::string& key) const {
    const auto archive = object(key);
    return number_of(archive->root(), key);
  }
  // A list or tuple of numbers (betas, base_lrs, _last_lr).
  std::vector<double> numbers(const std::string& key) const {
    const auto archive = object(key);
    const checkpoint::PickleValue& value = archive->root();
    TITAN_CHECK(value.is(checkpoint::PickleKind::list) || value.is(checkpoint::PickleKind::tuple),
                "{}: item '{}' is a {}, not a list of numbers", metadata_, key, value.describe());
    std::vector<double> out;
    for (const checkpoint::PickleValue* item : value.items) out.push_back(number_of(*item, key));
    return out;
  }
  bool boolean(const std::string& key) const {
    const auto archive = object(key);
    const checkpoint::PickleValue& value = archive->root();
    if (value.is(checkpoint::PickleKind::none)) return false;
    TITAN_CHECK(value.is(checkpoint::PickleKind::boolean), "{}: item '{}' is a {}, not a bool", metadata_, key,
                value.describe());
    return value.boolean;
  }
  // A str item holding JSON (titan's own items).
  json json_text(const std::string& key) const {
    const auto archive = object(key);
    const checkpoint::PickleValue& value = archive->root();
    TITAN_CHECK(value.is(checkpoint::PickleKind::text), "{}: item '{}' is a {}, not titan's JSON text", metadata_, key,
                value.describe());
    try {
      return json::parse(value.text);
    } catch (const json::exception& error) {
      fail("{}: item '{}' is not JSON: {}", metadata_, key, error.what());
    }
  }

 private:
  std::unique_ptr<checkpoint::TorchArchive> object(const std::string& key) const {
    TITAN_CHECK(reader_.has_object(key), "{}: no item '{}'{}", metadata_, key,
                reader_.has_tensor(key) ? " that is a Python object (it is a tensor)" : "");
    return reader_.read_object(key);
  }
  double number_of(const checkpoint::PickleValue& value, const std::string& key) const {
    if (value.is(checkpoint::PickleKind::integer)) return static_cast<double>(value.integer);
    TITAN_CHECK(value.is(checkpoint::PickleKind::floating), "{}: item '{}' holds a {}, not a number", metadata_, key,
                value.describe());
    return value.floating;
  }

  const checkpoint::DcpFolderReader& reader_;
  std::string metadata_;
};

// Whether two hyper-parameters agree up to the rounding of a decimal written by Python and read back.
bool same_value(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max({1.0, std::fabs(a), std::fabs(b)}); }

// The parameter an "optimizer.state." / "optimizer.param_groups." item is
// about, and the rest of its key: the longest of the model's names it starts
// with (FQNs hold dots too). Empty when none.
std::pair<std::string, std::string> split_optimizer_key(const std::string& rest,
                                                        const std::map<std::string, Shape>& names) {
  std::string best;
  for (const auto& [fqn, shape] : names) {
    if (rest.size() > fqn.size() + 1 && starts_with(rest, fqn) && rest[fqn.size()] == '.' && fqn.size() > best.size())
      best = fqn;
  }
  if (best.empty()) return {};
  return {best, rest.substr(best.size() + 1)};
}

// Refuses optimizer items that are not AdamW's state of this model's trainable
// parameters, then returns the one step count they agree on.
int64_t check_adamw_items(const checkpoint::DcpFolderReader& reader, const ObjectReader& objects,
                          const std::map<std::string, Shape>& trainable) {
  const std::string& metadata = objects.metadata();
  const std::string restart = "(checkpoint.exclude_from_loading = [\"optimizer\"] starts AdamW afresh)";
  for (const std::string& key : reader.metadata().keys) {
    if (!starts_with(key, "optimizer.")) continue;
    const bool state = starts_with(key, kStatePrefix);
    TITAN_CHECK(state || starts_with(key, kGroupPrefix),
                "{}: item '{}' is not part of PyTorch's flattened optimizer state dict (state.<fqn>.<name>, "
                "param_groups.<fqn>.<name>) {}",
                metadata, key, restart);
    const auto [fqn, name] =
        split_optimizer_key(key.substr(std::string(state ? kStatePrefix : kGroupPrefix).size()), trainable);
    TITAN_CHECK(!fqn.empty(), "{}: item '{}' is the optimizer state of a parameter this job's model does not train {}",
                metadata, key, restart);
    TITAN_CHECK(!state || kAdamWState.count(name) != 0,
                "{}: item '{}' is not AdamW's state (titan's AdamW keeps exp_avg, exp_avg_sq and step): the checkpoint "
                "was saved by another optimizer or configuration {}",
                metadata, key, restart);
  }
  int64_t steps = -1;
  std::string steps_key;
  for (const auto& [fqn, shape] : trainable) {
    for (const char* moment : {"exp_avg", "exp_avg_sq"}) {
      const std::string key = dcp_optimizer_state_key(fqn, moment);
      TITAN_CHECK(reader.has_tensor(key), "{}: missing tensor '{}' (AdamW's {} of parameter '{}') {}", metadata, key,
                  moment, fqn, restart);
      const checkpoint::DcpTensorItem& item = reader.tensor(key);
      TITAN_CHECK(item.size == shape, "{}: tensor '{}' has shape {}, but this job's parameter '{}' is {}", metadata,
                  key, shape_str(item.size), fqn, shape_str(shape));
      TITAN_CHECK(item.dtype.has_value(), "{}: tensor '{}' is {}, which titan does not read", metadata, key,
                  item.dtype_name);
    }
    const std::string key = dcp_optimizer_state_key(fqn, "step");
    TITAN_CHECK(objects.has(key), "{}: missing item '{}' (AdamW's step count of parameter '{}') {}", metadata, key, fqn,
                restart);
    const int64_t step = objects.integer(key);
    TITAN_CHECK(steps < 0 || step == steps,
                "{}: '{}' is {} but '{}' is {}: titan's AdamW counts one step for every parameter {}", metadata, key,
                step, steps_key, steps, restart);
    steps = step;
    steps_key = key;
  }
  return std::max<int64_t>(steps, 0);
}

// Refuses hyper-parameters titan's AdamW cannot continue with; warns about
// those the job sets otherwise (the job's config applies, as on titan's own
// resume with a changed schedule).
void check_param_groups(const ObjectReader& objects, const std::map<std::string, Shape>& trainable,
                        const JobConfig& config, double lr_now, std::vector<std::string>& differences) {
  const std::string& metadata = objects.metadata();
  const OptimizerSection& o = config.optimizer;
  // A hyper-parameter usually differs alike for many parameters: one line each, counting the others.
  std::map<std::string, std::pair<std::string, int64_t>> alike;
  std::vector<std::string> order;
  for (const auto& [fqn, shape] : trainable) {
    auto key = [&fqn = fqn](const char* name) { return dcp_param_group_key(fqn, name); };
    for (const char* flag : {"amsgrad", "maximize"}) {
      TITAN_CHECK(!objects.has(key(flag)) || !objects.boolean(key(flag)),
                  "{}: '{}' is True: titan's AdamW has no {} (set checkpoint.exclude_from_loading = [\"optimizer\"] "
                  "to start AdamW afresh)",
                  metadata, key(flag), flag);
    }
    // Recent PyTorch writes it (AdamW is Adam with it true): false is Adam, whose weight decay is an L2 term.
    if (objects.has(key("decoupled_weight_decay")) && objects.has(key("weight_decay"))) {
      TITAN_CHECK(objects.boolean(key("decoupled_weight_decay")) || objects.number(key("weight_decay")) == 0.0,
                  "{}: '{}' is False with weight decay {}: saved by Adam (L2 weight decay), not AdamW (set "
                  "checkpoint.exclude_from_loading = [\"optimizer\"] to start AdamW afresh)",
                  metadata, key("decoupled_weight_decay"), objects.number(key("weight_decay")));
    }
    auto compare = [&](const char* name, double theirs, double ours, const char* job_key) {
      if (same_value(theirs, ours)) return;
      const std::string kind = fmt::format("{} {} {}", name, theirs, ours);
      const auto [found, first] =
          alike.try_emplace(kind, fmt::format("'{}' is {} ({} gives {})", key(name), theirs, job_key, ours), 0);
      if (first) order.push_back(kind);
      ++found->second.second;
    };
    if (objects.has(key("lr"))) compare("lr", objects.number(key("lr")), lr_now, "optimizer.lr and the schedule");
    if (objects.has(key("initial_lr"))) compare("initial_lr", objects.number(key("initial_lr")), o.lr, "optimizer.lr");
    if (objects.has(key("eps"))) compare("eps", objects.number(key("eps")), o.eps, "optimizer.eps");
    if (objects.has(key("weight_decay"))) {
      compare("weight_decay", objects.number(key("weight_decay")), decays(o, fqn) ? o.weight_decay : 0.0,
              "optimizer.weight_decay with no_weight_decay");
    }
    if (objects.has(key("betas"))) {
      const std::vector<double> betas = objects.numbers(key("betas"));
      TITAN_CHECK(betas.size() == 2, "{}: '{}' holds {} numbers, AdamW's betas are 2", metadata, key("betas"),
                  betas.size());
      compare("betas", betas[0], o.beta1, "optimizer.beta1");
      if (same_value(betas[0], o.beta1)) compare("betas", betas[1], o.beta2, "optimizer.beta2");
    }
  }
  for (const std::string& kind : order) {
    const auto& [message, count] = alike.at(kind);
    differences.push_back(count == 1 ? message
                                     : fmt::format("{}, and alike for {} more parameters", message, count - 1));
  }
}

void convert_checkpoint(const std::string& step_folder, const std::string& output, const ConvertOptions& options) {
  const fs::path root(step_folder);
  const std::string metadata_path = (root / checkpoint::kMetadataFile).string();
  TITAN_CHECK(fs::is_regular_file(root / "job.toml"), "{}: missing job.toml (not a titan checkpoint step folder?)",
              step_folder);
  TITAN_CHECK(!options.dtype.has_value(),
              "--dtype: a training checkpoint converts bit for bit (AdamW's moments belong to the weights they were "
              "computed for); convert a model export to change the dtype");
  TITAN_CHECK(options.merge_lora.empty(), "--merge-lora applies to --to titan and --to hf, not --to dcp");
  JobConfig config;
  load_toml_file(config, (root / "job.toml").string());
  TITAN_CHECK(!config.lora.enable,
              "{}: a LoRA job's checkpoint has adapters, which TorchTitan's layout has no place for; convert its "
              "model export (the merged weights) instead",
              step_folder);
  auto metadata = std::make_shared<checkpoint::CheckpointMetadata>(
      checkpoint::parse_checkpoint_metadata(data::read_file(metadata_path, "checkpoint metadata"), metadata_path));
  const json& state = metadata->state;
  const auto embedding = metadata->tensors.find("model.tok_embeddings.weight");
  if (config.model.vocab_size <= 0 && embedding != metadata->tensors.end())
    config.model.vocab_size = embedding->second.shape.at(0);
  const models::DecoderConfig decoder = exported_model_config(config, step_folder);
  const auto model = decoder.build(Device::meta());  // names and shapes only
  const std::vector<std::string> contents =
      state.contains("contents") ? state["contents"].get<std::vector<std::string>>() : std::vector<std::string>{};
  auto holds = [&](const char* part) { return std::find(contents.begin(), contents.end(), part) != contents.end(); };
  const bool optimizer = holds("optimizer");

  // What the step folder must hold: the model's tensors and, for a full state, every trainable parameter's moments.
  std::set<std::string> names;
  for (auto& [name, tensor] : model->named_state()) names.insert("model." + name);
  std::vector<std::string> trainable;
  for (auto& [name, parameter] : model->named_parameters()) {
    if (!parameter->data.requires_grad()) continue;
    trainable.push_back(name);
    for (const char* moment : {"exp_avg", "exp_avg_sq"}) names.insert(fmt::format("optimizer.{}.{}", moment, name));
  }
  // The checkpoint's own checks (complete, its step, no tensor the model lacks), reading nothing yet.
  const std::vector<std::string> parts =
      optimizer ? std::vector<std::string>{"model", "optimizer"} : std::vector<std::string>{"model"};
  Checkpointer::load(step_folder, {}, parts, &names);
  for (const std::string& name : names) {
    if (!optimizer && !starts_with(name, "model.")) continue;
    TITAN_CHECK(metadata->tensors.count(name) != 0, "{}: missing tensor '{}'", metadata_path, name);
  }
  for (auto& [name, tensor] : model->named_state()) {
    const Shape& stored = metadata->tensors.at("model." + name).shape;
    TITAN_CHECK(stored == tensor.shape(), "{}: tensor 'model.{}' has shape {}, but job.toml implies {}", metadata_path,
                name, shape_str(stored), shape_str(tensor.shape()));
  }
  auto reader = std::make_shared<checkpoint::ChunkReader>(step_folder, *metadata);
  auto whole = [metadata, reader](const std::string& stored) {
    const checkpoint::TensorMetadata& tensor = metadata->tensors.at(stored);
    return [metadata, reader, stored, dtype = tensor.dtype, shape = Shape(tensor.shape)] {
      Tensor out = Tensor::empty(shape, dtype);
      reader->read_box(stored, out, shape, Shape(shape.size(), 0));
      return out;
    };
  };
  auto source = [&](const std::string& key, const std::string& stored) {
    const checkpoint::TensorMetadata& tensor = metadata->tensors.at(stored);
    return checkpoint::TensorSource{key, tensor.dtype, Shape(tensor.shape), whole(stored)};
  };

  // TorchTitan's state dict: the model's at the top level, then its Stateful objects' items.
  checkpoint::TensorSources sources;
  for (auto& [name, tensor] : model->named_state()) sources.push_back(source(name, "model." + name));
  std::vector<checkpoint::DcpObject> objects;
  const int64_t step = state.contains("train_state") ? state["train_state"].value("step", int64_t{0}) : metadata->step;
  const optim::LrSchedule schedule = build_lr_schedule(config, /*reports=*/false);
  // LambdaLR has set the LR of the next step (index `step`, titan's step + 1).
  const double lr_now = config.optimizer.lr * schedule.factor(step + 1);
  if (optimizer) {
    const int64_t steps_taken = state.contains("optimizer") ? state["optimizer"].value("steps_taken", step) : step;
    for (const std::string& fqn : trainable) {
      // PyTorch's AdamW keeps its step count per parameter, as an f32 scalar tensor.
      sources.push_back({dcp_optimizer_state_key(fqn, "step"), DType::f32, Shape{},
                         [steps_taken] { return Tensor::full(Shape{}, static_cast<double>(steps_taken)); }});
      for (const char* moment : {"exp_avg", "exp_avg_sq"})
        sources.push_back(source(dcp_optimizer_state_key(fqn, moment), fmt::format("optimizer.{}.{}", moment, fqn)));
      add_param_group(objects, fqn, config, lr_now);
    }
  }
  if (holds("lr_scheduler")) add_lr_scheduler(objects, step, config.optimizer.lr, lr_now);
  if (holds("train_state")) {
    objects.push_back({"train_state.step", pickled_int(step)});
    objects.push_back({"train_state.ntokens_seen", pickled_int(tokens_seen(config, state, step))});
  }
  json titan_state = state;
  titan_state.erase("dataloader");
  objects.push_back({kDcpTitanStateKey, pickled_text(titan_state.dump())});
  if (holds("dataloader") && state.contains("dataloader"))
    objects.push_back({kDcpTitanLoaderKey, pickled_text(state["dataloader"].dump())});

  publish_dcp_folder(output, sources, objects, (root / "job.toml").string());
}

void load_training_state(const std::string& folder, const std::vector<std::string>& parts,
                         const std::vector<StateTensor>& tensors, const JobConfig& config, const comm::DeviceMesh& mesh,
                         TrainingState::Parts& state) {
  const auto start = SteadyClock::now();
  const bool reports = mesh.coordinate(comm::MeshDim::world) == 0;
  TITAN_CHECK(!config.lora.enable,
              "checkpoint.initial_load_path {}: lora.enable with initial_load_model_only = false: a DCP folder holds "
              "no LoRA adapters or their optimizer state; set checkpoint.initial_load_model_only = true to train "
              "adapters on its weights",
              folder);
  const checkpoint::DcpFolderReader reader(folder);
  const ObjectReader objects(reader);
  const std::string& metadata = objects.metadata();
  auto use = [&](const char* part) { return std::find(parts.begin(), parts.end(), part) != parts.end(); };
  TITAN_CHECK(objects.has("train_state.step"),
              "{}: no item 'train_state.step': not a training checkpoint (a model-only save?); set "
              "checkpoint.initial_load_model_only = true to load its weights",
              metadata);
  const int64_t step = objects.integer("train_state.step");
  const json titan_state = objects.has(kDcpTitanStateKey) ? objects.json_text(kDcpTitanStateKey) : json::object();
  const double lr_now = config.optimizer.lr * state.schedule.factor(step + 1);
  std::vector<std::string> differences;

  if (use("optimizer")) {
    // The whole model's trainable parameters (a pipeline rank holds its stages' only).
    std::map<std::string, Shape> trainable;
    const auto whole = state.job.model->config.build(Device::meta());
    for (auto& [name, parameter] : whole->named_parameters()) {
      if (parameter->data.requires_grad()) trainable[name] = parameter->data.shape();
    }
    const int64_t steps_taken = check_adamw_items(reader, objects, trainable);
    check_param_groups(objects, trainable, config, lr_now, differences);
    autograd::NoGradGuard no_grad;
    for (const StateTensor& t : tensors) {
      if (t.part != "optimizer") continue;
      // "optimizer.exp_avg.<fqn>" (titan's name) -> "optimizer.state.<fqn>.exp_avg" (PyTorch's).
      const std::string rest = t.name.substr(std::string("optimizer.").size());
      const size_t dot = rest.find('.');
      const std::string key = dcp_optimizer_state_key(rest.substr(dot + 1), rest.substr(0, dot));
      const Tensor box = reader.read_box(key, Shape(t.offsets), t.tensor.shape());
      titan::copy_(t.tensor, box.to(t.tensor.dtype()).to(t.tensor.device()));
    }
    state.optimizer.set_steps_taken(steps_taken);
  }
  if (use("train_state")) {
    state.step = step;
    if (titan_state.contains("rng")) {
      state.generator.set_state(titan_state["rng"].at("seed").get<uint64_t>(),
                                titan_state["rng"].at("offset").get<uint64_t>());
    }
  }
  if (use("lr_scheduler")) {
    // Titan's LR is a function of the step; TorchTitan steps its LambdaLR once per training step.
    TITAN_CHECK(objects.has("lr_scheduler.last_epoch"),
                "{}: no item 'lr_scheduler.last_epoch' (the LR schedule's position); set "
                "checkpoint.exclude_from_loading = [\"lr_scheduler\"] to take the schedule from train_state.step",
                metadata);
    const int64_t last_epoch = objects.integer("lr_scheduler.last_epoch");
    TITAN_CHECK(last_epoch == step,
                "{}: 'lr_scheduler.last_epoch' is {} but 'train_state.step' is {}: titan's LR schedule position is "
                "the training step",
                metadata, last_epoch, step);
    if (objects.has("lr_scheduler.base_lrs")) {
      for (double base : objects.numbers("lr_scheduler.base_lrs")) {
        if (!same_value(base, config.optimizer.lr))
          differences.push_back(
              fmt::format("'lr_scheduler.base_lrs' holds {} (optimizer.lr is {})", base, config.optimizer.lr));
      }
    }
    if (titan_state.contains("lr_scheduler")) {
      const json& saved = titan_state["lr_scheduler"];
      const optim::LrSchedule& s = state.schedule;
      if (saved.value("warmup_steps", s.warmup_steps) != s.warmup_steps ||
          saved.value("total_steps", s.total_steps) != s.total_steps ||
          saved.value("decay_ratio", s.decay_ratio) != s.decay_ratio ||
          saved.value("decay_type", s.decay_type) != s.decay_type ||
          saved.value("min_lr_factor", s.min_lr_factor) != s.min_lr_factor)
        differences.push_back(fmt::format("'{}' holds LR schedule {}", kDcpTitanStateKey, saved.dump()));
    }
  }
  if (use("dataloader") && state.loader != nullptr) {
    if (objects.has(kDcpTitanLoaderKey)) {
      // The cursor into the global row stream is the same on every data-parallel rank (data_loader.h).
      const json loaders = objects.json_text(kDcpTitanLoaderKey);
      TITAN_CHECK(loaders.is_object() && !loaders.empty(), "{}: '{}' holds no loader state", metadata,
                  kDcpTitanLoaderKey);
      const std::string mine = std::to_string(mesh.coordinate(comm::MeshDim::dp));
      const json& chosen = loaders.contains(mine) ? loaders.at(mine) : loaders.begin().value();
      try {
        state.loader->load_state_dict(chosen);
      } catch (const Error& error) {
        fail(
            "{}: '{}': {}. The dataloader state depends on training.dataset_path, training.seed, validation.enable "
            "and validation.split (and the tokenizer's BOS/EOS, and chat.enable): set them as the run that saved it "
            "did, or start the data afresh with checkpoint.exclude_from_loading = [\"dataloader\"]",
            metadata, kDcpTitanLoaderKey, error.what());
      }
    } else if (reports) {
      std::printf(
          "titan: warning: %s holds no titan data loader state (TorchTitan's own, if any, means nothing to "
          "titan's loader): the data starts from the beginning (checkpoint.exclude_from_loading = "
          "[\"dataloader\"] says so without this warning)\n",
          folder.c_str());
    }
  }
  if (reports) {
    for (const std::string& difference : differences) {
      std::printf("titan: warning: %s: %s; this job's configuration applies\n", folder.c_str(), difference.c_str());
    }
    std::printf("titan: loaded %s from %s (step %lld, a PyTorch Distributed Checkpoint, in %.2f s)\n",
                fmt::format("{}", fmt::join(parts, ", ")).c_str(), folder.c_str(), static_cast<long long>(state.step),
                seconds_since(start));
    std::fflush(stdout);
  }
}

}  // namespace dcp_training_state_detail

std::string dcp_optimizer_state_key(const std::string& fqn, const std::string& state) {
  return dcp_training_state_detail::kStatePrefix + fqn + "." + state;
}

std::string dcp_param_group_key(const std::string& fqn, const std::string& hyper_parameter) {
  return dcp_training_state_detail::kGroupPrefix + fqn + "." + hyper_parameter;
}

void convert_titan_checkpoint_to_dcp(const std::string& step_folder, const std::string& output,
                                     const ConvertOptions& options) {
  dcp_training_state_detail::convert_checkpoint(step_folder, output, options);
}

void load_dcp_training_state(const std::string& folder, const std::vector<std::string>& parts,
                             const std::vector<StateTensor>& tensors, const JobConfig& config,
                             const comm::DeviceMesh& mesh, TrainingState::Parts& state) {
  dcp_training_state_detail::load_training_state(folder, parts, tensors, config, mesh, state);
}

}  // namespace titan::train
