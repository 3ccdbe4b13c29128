// The Hugging Face families titan reads from config.json (Mistral, Qwen 2,
// Gemma 2, Gemma 3, OLMo 2, Phi-3) against tests/reference/hf_families.py,
// plain PyTorch written from transformers' maths, on small random HF folders
// (tests/reference/make_hf_family_folder.py: windows of 4, Gemma 2's soft-caps
// small enough to bend the numbers, Gemma 3's local and global layers, Qwen 2's
// biases, Phi-3's fused tensors): titan reads the folder, then
//  - logits, loss and every gradient (f32; flash and naive attention, fused
//    and plain loss), each titan gradient against the reference's gradient
//    of the HF tensor that holds it (Phi-3: its rows of qkv_proj, gate_up_proj);
//  - the same in bf16 mixed precision, as whole-tensor relative errors;
//  - greedy generation past the window (the KV cache with windows, local
//    RoPE and soft-caps) giving the reference's tokens;
//  - 20 AdamW steps through train::Trainer tracking the reference's run;
//  - and, so that none of this can pass by accident, each family's
//    distinctive feature switched off moving the logits far off.
// Each family's folder and each reference run is made once per test program.
#include <gtest/gtest.h>

#include <functional>

#include <filesystem>
#include <map>
#include <memory>
#include <random>

#include "data/peer_support.h"
#include "support/families.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/autograd/grad_mode.h"
#include "titan/checkpoint/safetensors.h"
#include "titan/models/generate.h"
#include "titan/models/hf/hf_decoder_config.h"
#include "titan/models/hf/hf_folder.h"
#include "titan/models/hf/hf_weights.h"
#include "titan/models/model_spec.h"
#include "titan/parallel/mixed_precision.h"
#include "titan/train/trainer.h"

namespace titan {
namespace hf_family_parity_test {

namespace fs = std::filesystem;
using data::testing::run_command;
using data::testing::shell_quote;
using data::testing::TempDir;

const std::vector<std::string> kFamilies = testing::families_from_hf_config();

// The forward case: 2 sequences of 24 tokens (six windows), a few labels ignored.
constexpr int64_t kBatch = 2, kSeq = 24;
// Generation: a prompt three windows long, then 10 greedy tokens.
constexpr int64_t kPromptLength = 12, kNewTokens = 10;
// Training: 20 steps over 5 batches of 2 x 32 tokens, cycled, so the loss really falls.
constexpr int64_t kSteps = 20, kTrainBatches = 5, kTrainBatch = 2, kTrainSeq = 32;
constexpr double kLr = 3e-3, kWeightDecay = 0.1, kMaxNorm = 1.0;
constexpr int64_t kWarmup = 4;

// Runs tests/reference/<script> with (already quoted) arguments; throws with its output when it fails.
void run_reference(const std::string& script, const std::string& arguments) {
  const std::string command = std::string(TITAN_PYTHON) + " " +
                              shell_quote(std::string(TITAN_REFERENCE_SCRIPTS_DIR) + "/" + script) + " " + arguments;
  const auto result = run_command(command);
  if (result.exit_code != 0) throw std::runtime_error(command + " failed:\n" + result.output);
}

std::string q(const fs::path& path) { return shell_quote(path.string()); }

// Token ids in [0, vocab) from a fixed generator (mt19937's sequence is fixed by the standard).
std::vector<int64_t> random_ids(std::mt19937& generator, int64_t count, int64_t vocab) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < count; ++i) ids.push_back(static_cast<int64_t>(generator() % static_cast<uint32_t>(vocab)));
  return ids;
}

// One family's random HF folder, what titan reads from it, and the reference's answers (each computed on first use).
class Family {
 public:
  explicit Family(const std::string& model) : model_(model) {
    const size_t index = std::find(kFamilies.begin(), kFamilies.end(), model) - kFamilies.begin();
    run_reference("make_hf_family_folder.py", model + " " + q(dir_ / "hf") + fmt::format(" --seed {}", 100 + index));
    reader_ = std::make_unique<models::HfFolderReader>((dir_ / "hf").string());
    config_ = models::decoder_config_from_hf(reader_->config());
    weights_ = models::read_hf_weights(*reader_, config_);
    vocab_ = config_.vocab_size;
  }

  const std::string& model() const { return model_; }
  const fs::path& dir() const { return dir_.path(); }
  const models::DecoderConfig& config() const { return config_; }
  const models::HfFamily& hf_family() const { return models::hf_family(reader_->config()); }

  // The folder's model with `config` (the folder's, possibly edited), each
  // weight under `rename(name)`.
  std::shared_ptr<models::Decoder> build(
      const models::DecoderConfig& config,
      const std::function<std::string(const std::string&)>& rename = [](const std::string& n) { return n; }) const {
    auto model = config.build();
    std::map<std::string, Tensor> state = model->state_dict();
    for (const auto& [name, tensor] : weights_) state[rename(name)] = tensor;
    model->load_state_dict(state);
    return model;
  }

  Tensor input_ids() const { return forward_inputs().first; }
  Tensor labels() const { return forward_inputs().second; }

  // hf_families.py forward (float64) on input_ids / labels.
  const checkpoint::SafetensorsReader& forward() {
    if (!forward_) {
      checkpoint::write_safetensors((dir_ / "inputs.safetensors").string(),
                                    {{"input_ids", input_ids()}, {"labels", labels()}});
      run_reference("hf_families.py", "forward " + q(dir_ / "hf") + " " + q(dir_ / "inputs.safetensors") + " " +
                                          q(dir_ / "forward.safetensors"));
      forward_ = std::make_unique<checkpoint::SafetensorsReader>((dir_ / "forward.safetensors").string());
    }
    return *forward_;
  }

  std::vector<int64_t> prompt() const {
    std::mt19937 generator(7);
    return random_ids(generator, kPromptLength, vocab_);
  }
  // hf_families.py generate (float64, the whole sequence each step: no cache).
  std::vector<int64_t> generated() {
    if (generated_.empty()) {
      const std::vector<int64_t> ids = prompt();
      checkpoint::write_safetensors((dir_ / "prompt.safetensors").string(),
                                    {{"input_ids", Tensor::from_vector(ids, {1, kPromptLength})}});
      run_reference("hf_families.py", "generate " + q(dir_ / "hf") + " " + q(dir_ / "prompt.safetensors") + " " +
                                          q(dir_ / "generated.safetensors") +
                                          fmt::format(" --new-tokens {}", kNewTokens));
      generated_ = checkpoint::SafetensorsReader((dir_ / "generated.safetensors").string()).read("tokens").to_ints();
    }
    return generated_;
  }

  // Training batch `i` (0-based; step s uses batch (s - 1) % kTrainBatches): next-token labels of random text.
  std::pair<Tensor, Tensor> train_batch(int64_t i) const {
    std::mt19937 generator(static_cast<uint32_t>(1000 + i));
    const std::vector<int64_t> ids = random_ids(generator, kTrainBatch * (kTrainSeq + 1), vocab_);
    const Tensor all = Tensor::from_vector(ids, {kTrainBatch, kTrainSeq + 1});
    return {all.narrow(1, 0, kTrainSeq).contiguous(), all.narrow(1, 1, kTrainSeq).contiguous()};
  }
  // hf_families.py train (float32) on the same batches and optimizer settings.
  const checkpoint::SafetensorsReader& trained() {
    if (!trained_) {
      checkpoint::NamedTensors batches;
      for (int64_t step = 1; step <= kSteps; ++step) {
        const auto [ids, labels] = train_batch((step - 1) % kTrainBatches);
        batches.emplace_back(fmt::format("input_ids.{}", step), ids);
        batches.emplace_back(fmt::format("labels.{}", step), labels);
      }
      checkpoint::write_safetensors((dir_ / "batches.safetensors").string(), batches);
      run_reference("hf_families.py", "train " + q(dir_ / "hf") + " " + q(dir_ / "batches.safetensors") + " " +
                                          q(dir_ / "trained.safetensors") +
                                          fmt::format(" --steps {} --lr {} --warmup {} --weight-decay {} --max-norm {}",
                                                      kSteps, kLr, kWarmup, kWeightDecay, kMaxNorm));
      trained_ = std::make_unique<checkpoint::SafetensorsReader>((dir_ / "trained.safetensors").string());
    }
    return *trained_;
  }

  // The reference's per-HF-tensor values `prefix` + HF name, as titan tensors: a
  // fused HF tensor's rows split into its parts, layouts as titan holds them.
  std::map<std::string, Tensor> titan_tensors(const checkpoint::SafetensorsReader& reference, const std::string& prefix,
                                              models::Decoder& model) const {
    std::vector<std::pair<std::string, Shape>> shapes;
    std::map<std::string, Shape> shape_of;
    for (const auto& [name, parameter] : model.named_parameters()) {
      shapes.emplace_back(name, parameter->data.shape());
      shape_of[name] = parameter->data.shape();
    }
    std::map<std::string, Tensor> result;
    size_t hf_tensors = 0;
    for (const models::HfTensorPlan& plan : models::hf_tensor_plan(hf_family(), shapes)) {
      const Tensor whole = reference.read(prefix + plan.hf_name);
      ++hf_tensors;
      int64_t row = 0;
      for (const models::HfTensorPart& part : plan.parts) {
        const int64_t rows = shape_of.at(part.titan_name).front();
        result[part.titan_name] =
            models::from_hf_layout(part.titan_name, whole.narrow(0, row, rows).contiguous(), config_);
        row += rows;
      }
      EXPECT_EQ(row, whole.size(0)) << plan.hf_name << ": rows the parts leave out";
    }
    // Every tensor of the reference's answer was placed: none of the folder's weights escaped the mapping.
    size_t with_prefix = 0;
    for (const auto& entry : reference.header().entries) with_prefix += entry.name.starts_with(prefix) ? 1 : 0;
    EXPECT_EQ(hf_tensors, with_prefix);
    return result;
  }

 private:
  std::pair<Tensor, Tensor> forward_inputs() const {
    std::mt19937 generator(3);
    const std::vector<int64_t> ids = random_ids(generator, kBatch * kSeq, vocab_);
    std::vector<int64_t> labels = random_ids(generator, kBatch * kSeq, vocab_);
    for (size_t i = 0; i < labels.size(); i += 7) labels[i] = -100;
    return {Tensor::from_vector(ids, {kBatch, kSeq}), Tensor::from_vector(labels, {kBatch, kSeq})};
  }

  std::string model_;
  TempDir dir_;
  std::unique_ptr<models::HfFolderReader> reader_;
  models::DecoderConfig config_;
  std::map<std::string, Tensor> weights_;
  int64_t vocab_ = 0;
  std::unique_ptr<checkpoint::SafetensorsReader> forward_, trained_;
  std::vector<int64_t> generated_;
};

Family& family(const std::string& model) {
  static std::map<std::string, std::unique_ptr<Family>> families;
  auto& slot = families[model];
  if (!slot) slot = std::make_unique<Family>(model);
  return *slot;
}

class HfFamilyParity : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFamilyParity, LogitsLossAndGradientsF32) {
  Family& f = family(GetParam());
  const checkpoint::SafetensorsReader& ref = f.forward();
  const Tensor expected_logits = ref.read("logits");
  const double expected_loss = ref.read("loss").to_floats().front();
  struct Variant {
    std::string attention;
    bool fused_loss;
  };
  for (const Variant& variant : {Variant{"flash", true}, Variant{"naive", false}}) {
    SCOPED_TRACE(variant.attention + (variant.fused_loss ? " attention, fused loss" : " attention, plain loss"));
    models::DecoderConfig config = f.config();
    config.edit_layers([&](nn::TransformerBlockConfig& layer) { layer.attention.attention_impl = variant.attention; });
    config.loss.fused = variant.fused_loss;
    const auto model = f.build(config);
    const models::DecoderInputs inputs{f.input_ids(), {}, {}};

    Tensor logits;
    {
      autograd::NoGradGuard no_grad;
      logits = model->logits(inputs);
    }
    // Two to four blocks of f32 from the same weights as the float64
    // reference: a few dozen roundings per logit, far inside the op-level
    // 2e-5 of the logits' scale; a wrong term (a window off by one, a cap
    // missing, norms without their 1 +) moves them by percents.
    const auto tol = testing::tolerance_for(DType::f32, expected_logits);
    EXPECT_TRUE(testing::all_close(logits, expected_logits, tol.atol, tol.rtol));

    const Tensor loss = model->loss(inputs, f.labels());
    // A mean of 41 f32 cross-entropies: relative 1e-5 covers their rounding.
    EXPECT_NEAR(loss.item(), expected_loss, 1e-5 * expected_loss);
    autograd::backward({loss});
    const auto expected_grads = f.titan_tensors(ref, "grad.", *model);
    double worst = 0.0;
    for (const auto& [name, parameter] : model->named_parameters()) {
      SCOPED_TRACE(name);
      ASSERT_TRUE(expected_grads.count(name));
      const Tensor& expected = expected_grads.at(name);
      const auto grad_tol = testing::tolerance_for(DType::f32, expected);
      // Through every layer's backward: 5x the op-level tolerance, as for llama3 / qwen3 (model_parity_test).
      EXPECT_TRUE(testing::all_close(parameter->data.grad(), expected, 5 * grad_tol.atol, 5 * grad_tol.rtol));
      worst = std::max(worst, testing::relative_l2_error(parameter->data.grad(), expected));
    }
    fmt::print("[ errors   ] {} {}: logits rel L2 {:.2e}, loss rel {:.2e}, worst gradient rel L2 {:.2e}\n", f.model(),
               variant.attention, testing::relative_l2_error(logits, expected_logits),
               std::abs(loss.item() - expected_loss) / expected_loss, worst);
  }
}

// bf16 mixed precision (weights and activations rounded to bf16, f32 master
// weights and gradients) against the same float64 reference. The f32 test
// checks the maths; this one that the bf16 path keeps it: whole-tensor
// relative errors with bounds a few times those observed, which a missing
// feature (a percent-sized change of every number) still exceeds.
TEST_P(HfFamilyParity, LogitsLossAndGradientsBf16) {
  Family& f = family(GetParam());
  const checkpoint::SafetensorsReader& ref = f.forward();
  const Tensor expected_logits = ref.read("logits");
  const double expected_loss = ref.read("loss").to_floats().front();
  const auto model = f.build(f.config());
  parallel::apply_mixed_precision(*model, DType::bf16);
  const models::DecoderInputs inputs{f.input_ids(), {}, {}};
  double logits_error = 0.0;
  {
    autograd::NoGradGuard no_grad;
    logits_error = testing::relative_l2_error(model->logits(inputs).to(DType::f32), expected_logits);
  }
  // bf16 keeps 8 significant bits (2^-9 relative per rounding); through two
  // to four blocks the logits' relative L2 error is 8e-3..1.7e-2 here.
  EXPECT_LT(logits_error, 5e-2);
  const Tensor loss = model->loss(inputs, f.labels());
  // A mean over 41 tokens averages the rounding out: 5e-5..6e-4 relative here.
  EXPECT_NEAR(loss.item(), expected_loss, 5e-3 * expected_loss);
  autograd::backward({loss});
  const auto expected_grads = f.titan_tensors(ref, "grad.", *model);
  double worst = 0.0;
  for (const auto& [name, parameter] : model->named_parameters()) {
    // Gradients sum many bf16 products with cancellation: up to 4.5e-2 relative L2 here (Gemma 3's).
    const double error = testing::relative_l2_error(parameter->data.grad(), expected_grads.at(name));
    EXPECT_LT(error, 0.1) << name;
    worst = std::max(worst, error);
  }
  fmt::print("[ errors   ] {} bf16: logits rel L2 {:.2e}, loss rel {:.2e}, worst gradient rel L2 {:.2e}\n", f.model(),
             logits_error, std::abs(loss.item() - expected_loss) / expected_loss, worst);
}

// The folders are small enough that each family's distinctive feature could
// hide in the tolerance: without it (windows off, Gemma 2's soft-caps off,
// Gemma 3's local RoPE table off, Qwen 2's biases zeroed, OLMo 2's norms
// moved before the sublayers as Llama places them) titan's logits must leave
// the reference's by far more than the f32 test allows.
TEST_P(HfFamilyParity, TheFamilysFeatureMatters) {
  Family& f = family(GetParam());
  models::DecoderConfig config = f.config();
  config.edit_layers([&](nn::TransformerBlockConfig& layer) {
    if (f.model() == "gemma2") layer.attention.logit_softcap = 0.0f;
    if (f.model() == "gemma3") layer.attention.local_rope = false;
    if (f.model() == "mistral" || f.model() == "phi3") layer.attention.sliding_window = 0;
    if (f.model() == "olmo2") {
      layer.pre_norms = true;
      layer.post_norms = false;
    }
  });
  if (f.model() == "gemma2") config.loss.softcap = 0.0f;
  const bool olmo2 = f.model() == "olmo2";
  const auto model = f.build(config, [olmo2](std::string name) {
    if (!olmo2) return name;  // OLMo 2's post-norms' weights become the pre-norms'
    for (const char* post : {"post_attention_norm", "post_ffn_norm"}) {
      if (const size_t at = name.find(post); at != std::string::npos) name.erase(at, 5);  // "post_"
    }
    return name;
  });
  if (f.model() == "qwen2") {
    std::map<std::string, Tensor> state = model->state_dict();
    for (auto& [name, tensor] : state) {
      if (name.ends_with(".bias")) tensor = Tensor::zeros(tensor.shape());
    }
    model->load_state_dict(state);
  }
  autograd::NoGradGuard no_grad;
  EXPECT_GT(testing::relative_l2_error(model->logits({f.input_ids(), {}, {}}), f.forward().read("logits")), 1e-3);
}

// Greedy decoding with titan's KV cache (one token's forward per step) gives
// the tokens of the reference, which recomputes the whole sequence each step.
// The prompt is three windows long, so the cached keys outside a sliding
// layer's window must be masked as the full forward masks them.
TEST_P(HfFamilyParity, GreedyGenerationMatches) {
  Family& f = family(GetParam());
  const auto model = f.build(f.config());
  models::SamplingOptions options;
  options.max_new_tokens = kNewTokens;
  EXPECT_EQ(models::generate(*model, f.prompt(), options), f.generated());
}

// 20 f32 AdamW steps through the trainer against the reference's run from the
// same folder weights on the same batches (same groups: no decay for norms and
// embeddings; warmup then linear decay; clipping at 1).
TEST_P(HfFamilyParity, TrainingTracksTheReference) {
  Family& f = family(GetParam());
  const checkpoint::SafetensorsReader& ref = f.trained();
  train::JobConfig job;
  // The model of the folder's config.json, started from its weights.
  job.model.hf_config = (f.dir() / "hf" / "config.json").string();
  job.checkpoint.initial_load_path = (f.dir() / "hf").string();
  job.optimizer.lr = kLr;
  job.optimizer.beta1 = 0.9;
  job.optimizer.beta2 = 0.95;
  job.optimizer.eps = 1e-8;
  job.optimizer.weight_decay = kWeightDecay;
  job.optimizer.no_weight_decay = {"norm", "tok_embeddings"};
  job.lr_scheduler.warmup_steps = kWarmup;
  job.training.steps = kSteps;
  job.training.max_norm = kMaxNorm;
  job.training.local_batch_size = kTrainBatch;
  job.training.seq_len = kTrainSeq;
  job.training.mixed_precision_param = "f32";
  job.metrics.peak_tflops = 1.0;  // skip the GEMM peak measurement
  job.metrics.progress = false;
  TempDir dump;
  job.job.dump_folder = dump.path().string();
  int64_t next = 0;
  train::Trainer trainer(job, [&] {
    const auto [ids, labels] = f.train_batch(next++ % kTrainBatches);
    data::Batch batch;
    batch.input_ids = ids;
    batch.labels = labels;
    return batch;
  });
  ASSERT_EQ(trainer.config().model.name, f.model());

  const std::vector<float> losses = ref.read("losses").to_floats(), norms = ref.read("grad_norms").to_floats();
  double worst_loss = 0.0, worst_norm = 0.0;
  for (int64_t step = 1; step <= kSteps; ++step) {
    const train::StepMetrics m = trainer.train_step();
    const double expected = losses[static_cast<size_t>(step - 1)];
    const double expected_norm = norms[static_cast<size_t>(step - 1)];
    // f32 both sides: the programs differ only in the order of sums, ~1e-6 relative after 20 steps.
    EXPECT_NEAR(m.loss, expected, 1e-4 * expected) << "step " << step;
    // The pre-clip norm of the whole gradient; a wrongly scaled gradient shows here first (AdamW hides it).
    EXPECT_NEAR(m.grad_norm, expected_norm, 1e-3 * expected_norm) << "step " << step;
    worst_loss = std::max(worst_loss, std::abs(m.loss - expected) / expected);
    worst_norm = std::max(worst_norm, std::abs(m.grad_norm - expected_norm) / expected_norm);
  }
  ASSERT_LT(losses.back(), 0.95 * losses.front()) << "the reference run does not learn: a weak test";
  // After 20 updates of size ~lr, f32 rounding differences of the two programs
  // stay far below lr (3e-3): the project's bound for llama3 / qwen3
  // (training_parity_test), and 1e-4 relative L2 per tensor (observed: under
  // 1e-5). Qwen 2's k biases are the exception: a key bias shifts every score
  // of a query alike except for its rotation, so in the slowly rotating RoPE
  // pairs its gradient is zero up to cancellation (1e-7..1e-5 against 1e-2
  // elsewhere); AdamW turns those rounding-sized gradients into lr-sized
  // steps, whose values then follow the rounding (2.4e-4 relative L2 seen on
  // AVX-512; on AVX2 one element 1.6e-4 from the reference). So those elements
  // are held to a third of one step (1e-3) instead of 1e-4; a wrong k bias still
  // shows at step 1, in the logits and gradients tests above.
  const auto expected_final = f.titan_tensors(ref, "final.", trainer.model());
  double worst_weight = 0.0;
  for (const auto& [name, parameter] : trainer.model().named_parameters()) {
    const Tensor& expected = expected_final.at(name);
    const bool key_bias = name.ends_with("wk.bias");
    EXPECT_TRUE(testing::all_close(parameter->data, expected, key_bias ? 1e-3 : 1e-4, 1e-3)) << name;
    const double error = testing::relative_l2_error(parameter->data, expected);
    EXPECT_LT(error, key_bias ? 1e-3 : 1e-4) << name;
    if (!key_bias) worst_weight = std::max(worst_weight, error);
  }
  fmt::print("[ errors   ] {} training: loss rel {:.2e}, grad norm rel {:.2e}, final weights rel L2 {:.2e}\n",
             f.model(), worst_loss, worst_norm, worst_weight);
}

INSTANTIATE_TEST_SUITE_P(Families, HfFamilyParity, ::testing::ValuesIn(kFamilies),
                         [](const auto& info) { return info.param; });

}  // namespace hf_family_parity_test
}  // namespace titan
