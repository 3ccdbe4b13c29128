// A mixture-of-experts feed-forward block (Qwen3-MoE, DeepSeek-V3 style): a
// router scores the experts per token and picks the top k, each token's row
// goes to its k experts (SwiGLU FFNs, computed as grouped GEMMs over the rows
// in expert order, dropless), and the experts' outputs come back weighted by
// the router. Optional shared experts see every token; gpt-oss adds biases to
// the router and the experts and clamps its SwiGLU. Load balancing either
// way: Hugging Face's auxiliary loss (MoEAuxLoss), or DeepSeek-V3's
// auxiliary-loss-free per-expert bias, which steers the choice of experts
// (not their weights) and which the trainer nudges after every step from the
// tokens each expert received (update_expert_bias).
//
// Single-device code. Expert parallelism replaces how the experts' rows are
// computed (GroupedExperts::set_dispatcher) from outside.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "titan/core/generator.h"
#include "titan/nn/feed_forward.h"
#include "titan/nn/linear.h"
#include "titan/ops/float8.h"

namespace titan::nn {

class MoE;

enum class RouterScore { softmax, sigmoid };
// The experts' gated activation: SwiGLU, silu(gate) * up, or gpt-oss's clamped
// SwiGLU, g * sigmoid(alpha * g) * (u + 1) with g = min(gate, limit) and
// u = clamp(up, -limit, limit) (ops::clamped_swiglu).
enum class ExpertActivation { swiglu, clamped_swiglu };
enum class ExpertImpl {
  grouped,  // every expert in one grouped GEMM per projection (the fast path)
  loop,     // one ordinary GEMM per expert (the plain reference; reads counts on the host)
};
RouterScore parse_router_score(const std::string& name);
ExpertImpl parse_expert_impl(const std::string& name);

struct MoEConfig {
  int64_t dim = 0;
  int64_t hidden_dim = 0;  // each expert's FFN width (moe_intermediate_size)
  int64_t num_experts = 0;
  int64_t top_k = 0;               // experts per token (num_experts_per_tok)
  int64_t num_shared_experts = 0;  // always-on experts, one FFN of num_shared_experts * hidden_dim
  // The shared experts' output is scaled per token by sigmoid(shared_expert_gate(x)),
  // a [1, dim] projection (Qwen3-Next / Qwen3.5's shared_expert_gate).
  bool shared_expert_gate = false;
  RouterScore score = RouterScore::softmax;
  bool normalize_top_k = true;  // norm_topk_prob: the k weights of a token sum to 1
  double route_scale = 1.0;     // multiplies the weights (DeepSeek-V3's routed_scaling_factor)
  // Group-limited routing (DeepSeek-V3's n_group, topk_group; 0 = off): the
  // experts fall into num_expert_groups equal groups, each group is scored by
  // the sum of its two best (biased) scores, and a token picks its top_k
  // experts among the num_limited_groups best groups only.
  int64_t num_expert_groups = 0;
  int64_t num_limited_groups = 0;
  bool router_bias = false;  // the router's gate has a bias (gpt-oss)
  // Each expert's projections have biases (gpt-oss): b1 (gate) and b3 (up) [E, hidden], b2 (down) [E, dim].
  bool expert_biases = false;
  ExpertActivation activation = ExpertActivation::swiglu;
  double swiglu_alpha = 1.702;      // clamped_swiglu's sigmoid gain
  double swiglu_limit = 7.0;        // and clamp
  double aux_loss_coef = 0.0;       // router_aux_loss_coef (0: no auxiliary loss)
  double load_balance_coeff = 0.0;  // aux-loss-free bias step per update (0: no bias)
  ExpertImpl expert_impl = ExpertImpl::grouped;

  std::shared_ptr<MoE> build(Device device = Device::cpu()) const;
};

// The auxiliary load-balancing loss of one forward pass, as Hugging Face's
// Qwen3-MoE computes it: over all MoE layers' tokens at once,
//   aux = E * sum_e F_e * P_e,
// F_e the fraction of (layer, token) pairs whose top k include expert e
// (summed over the k slots), P_e the mean router score of e over the same
// pairs. F couples every layer, so the loss cannot be one term per layer:
// each layer records its share (record), and in backward its router gets
// d(coef * aux)/dP_l = coef * E * F / L through F::with_auxiliary_gradient,
// which also works when activation checkpointing recomputes the layer. The
// records are keyed by layer slot, so a recomputation overwrites them with
// the same values.
class MoEAuxLoss {
 public:
  MoEAuxLoss(int64_t moe_layers, int64_t num_experts, double coef);
  // Layer `slot`'s token fraction per expert [E] and mean router scores [E] (f32, no history).
  void record(int64_t slot, const Tensor& token_fraction, const Tensor& mean_score);
  // d(coef * aux)/d(mean_score of a layer) [E], times the loss's own upstream gradient.
  Tensor gradient() const;
  // aux (without the coefficient), 0-d f32 on the device.
  Tensor value() const;
  // The gradient the loss receives from above (1 / micro-batches, ...): set by the
  // loss's backward, which runs before any layer's.
  void set_upstream_gradient(const Tensor& gradient) { upstream_ = gradient; }
  double coef() const { return coef_; }

 private:
  Tensor mean_over_layers(const std::vector<Tensor>& per_layer) const;
  int64_t layers_, experts_;
  double coef_;
  std::vector<Tensor> token_fraction_, mean_score_;
  Tensor upstream_;
};

// How the experts' rows are computed: rows [N, dim] in expert order with
// counts [E] i64 -> their outputs [N, dim]. Expert parallelism installs one
// that sends rows to the ranks holding their experts and back around `local`.
using ExpertsFunction = std::function<Tensor(const Tensor& rows, const Tensor& counts)>;
using ExpertsDispatcher = std::function<Tensor(const Tensor& rows, const Tensor& counts, const ExpertsFunction& local)>;

// The experts' weights, one SwiGLU FFN per expert stacked along dim 0:
// w1 (gate) and w3 (up) [E, hidden, dim], w2 (down) [E, dim, hidden]; with
// MoEConfig::expert_biases also b1, b3 [E, hidden] and b2 [E, dim].
class GroupedExperts : public Module {
 public:
  GroupedExperts(const MoEConfig& config, Device device);
  Tensor forward(const Tensor& rows, const Tensor& counts) const;
  void set_dispatcher(ExpertsDispatcher dispatcher) { dispatcher_ = std::move(dispatcher); }
  // Float8 or MXFP8 expert GEMMs (F::float8_grouped_gemm), installed from
  // outside by the quantize.grouped_mm converters (models/float8_plan.h).
  void set_float8(const ops::Float8Cast& cast) { float8_ = cast; }
  const std::optional<ops::Float8Cast>& float8() const { return float8_; }
  // Init rules: w1 N(0, 0.02) (unless set), w2 and w3 N(0, output_std), in [-2, 2].
  void set_init(double output_std);

  const MoEConfig config;
  Parameter* const w1;
  Parameter* const w2;
  Parameter* const w3;
  Parameter* b1 = nullptr;  // null unless config.expert_biases
  Parameter* b2 = nullptr;
  Parameter* b3 = nullptr;

 private:
  // The experts this module holds (all of them, or a rank's share under expert parallelism).
  Tensor compute(const Tensor& rows, const Tensor& counts) const;
  ExpertsDispatcher dispatcher_;
  std::optional<ops::Float8Cast> float8_;
};

class Router : public Module {
 public:
  Router(const MoEConfig& config, Device device);
  struct Routing {
    Tensor scores;   // [T, E] f32: softmax or sigmoid of the logits
    Tensor indices;  // [T, k] i64: the chosen experts (by score + bias)
    Tensor weights;  // [T, k] f32: their weights (differentiable)
  };
  // x [T, dim]; bias [E] f32 (undefined: none) shifts the choice only.
  Routing route(const Tensor& x, const Tensor& bias) const;

  const MoEConfig config;
  std::shared_ptr<Linear> gate;  // [E, dim]
};

class MoE : public Module {
 public:
  MoE(const MoEConfig& config, Device device);
  // x [..., dim] -> [..., dim]. `aux` (null: none) collects this forward
  // pass's statistics for the auxiliary loss, under this layer's slot (and
  // lives on in the backward graph, which reads it).
  Tensor forward(const Tensor& x, const std::shared_ptr<MoEAuxLoss>& aux) const;
  // Init rules: the router's gate N(0, 0.02); experts' w1 N(0, 0.02), w2 and w3 N(0, output_std) (as FeedForward).
  void set_init(double output_std);
  // Aux-loss-free balancing, after an optimizer step: each expert's bias moves
  // by load_balance_coeff towards the mean load (up if it got fewer tokens than
  // the mean, down if more) given the tokens per expert summed over every rank
  // that routed its own tokens; the bias stays centred at zero.
  void update_expert_bias(const Tensor& total_tokens_per_expert);

  const MoEConfig config;
  std::shared_ptr<Router> router;
  std::shared_ptr<GroupedExperts> experts;
  std::shared_ptr<FeedForward> shared_experts;  // null without shared experts
  std::shared_ptr<Linear> shared_expert_gate;   // null unless config.shared_expert_gate
  Tensor* const expert_bias;                    // [E] f32, saved with the model
  // [E] f32: tokens routed to each expert since it was last cleared (every
  // forward adds, activation-checkpoint recomputations included, which scale
  // every expert alike): the expert-load metric and the bias update read it.
  Tensor* const tokens_per_expert;
  int64_t aux_slot = 0;  // this layer's slot in MoEAuxLoss (its rank among the model's MoE layers)
};

}  // namespace titan::nn
