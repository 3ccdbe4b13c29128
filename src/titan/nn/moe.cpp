#include "titan/nn/moe.h"

#include <algorithm>
#include <cmath>

#include "titan/nn/functional.h"
#include "titan/ops/elementwise.h"
#include "titan/ops/moe_routing.h"
#include "titan/ops/random.h"
#include "titan/ops/reduction.h"

namespace titan::nn {

RouterScore parse_router_score(const std::string& name) {
  if (name == "softmax") return RouterScore::softmax;
  if (name == "sigmoid") return RouterScore::sigmoid;
  fail("router score '{}' is not one of softmax, sigmoid", name);
}

ExpertImpl parse_expert_impl(const std::string& name) {
  if (name == "grouped") return ExpertImpl::grouped;
  if (name == "loop") return ExpertImpl::loop;
  fail("expert implementation '{}' is not one of grouped, loop", name);
}

std::shared_ptr<MoE> MoEConfig::build(Device device) const { return std::make_shared<MoE>(*this, device); }

// ---- the auxiliary loss ----

MoEAuxLoss::MoEAuxLoss(int64_t moe_layers, int64_t num_experts, double coef)
    : layers_(moe_layers),
      experts_(num_experts),
      coef_(coef),
      token_fraction_(static_cast<size_t>(moe_layers)),
      mean_score_(static_cast<size_t>(moe_layers)) {}

void MoEAuxLoss::record(int64_t slot, const Tensor& token_fraction, const Tensor& mean_score) {
  TITAN_CHECK(slot >= 0 && slot < layers_, "MoEAuxLoss: slot {} of {} MoE layers", slot, layers_);
  token_fraction_[static_cast<size_t>(slot)] = token_fraction;
  mean_score_[static_cast<size_t>(slot)] = mean_score;
}

Tensor MoEAuxLoss::mean_over_layers(const std::vector<Tensor>& per_layer) const {
  Tensor sum;
  for (const Tensor& layer : per_layer) {
    TITAN_CHECK(layer.defined(), "MoEAuxLoss: a MoE layer did not record its statistics in this forward pass");
    sum = sum.defined() ? ops::add(sum, layer) : layer.clone();
  }
  return ops::scale(sum, 1.0f / static_cast<float>(layers_));
}

Tensor MoEAuxLoss::gradient() const {
  Tensor grad = ops::scale(mean_over_layers(token_fraction_),
                           static_cast<float>(coef_ * static_cast<double>(experts_) / static_cast<double>(layers_)));
  // The loss's own gradient is a 0-d device tensor: broadcast on the device, never read on the host.
  if (upstream_.defined())
    grad = ops::mul(grad, upstream_.to(DType::f32).reshape({1}).expand(grad.shape()).contiguous());
  return grad;
}

Tensor MoEAuxLoss::value() const {
  const Tensor product = ops::mul(mean_over_layers(token_fraction_), mean_over_layers(mean_score_));
  return ops::scale(ops::sum(product), static_cast<float>(experts_));
}

// ---- experts ----

GroupedExperts::GroupedExperts(const MoEConfig& config, Device device)
    : config(config),
      w1(register_parameter("w1",
                            Tensor::empty({config.num_experts, config.hidden_dim, config.dim}, DType::f32, device))),
      w2(register_parameter("w2",
                            Tensor::empty({config.num_experts, config.dim, config.hidden_dim}, DType::f32, device))),
      w3(register_parameter("w3",
                            Tensor::empty({config.num_experts, config.hidden_dim, config.dim}, DType::f32, device))) {
  if (config.expert_biases) {
    b1 = register_parameter("b1", Tensor::empty({config.num_experts, config.hidden_dim}, DType::f32, device));
    b2 = register_parameter("b2", Tensor::empty({config.num_experts, config.dim}, DType::f32, device));
    b3 = register_parameter("b3", Tensor::empty({config.num_experts, config.hidden_dim}, DType::f32, device));
  }
  set_init(0.02);
}

namespace moe_expert_bias {

// y plus each row's expert's bias [E, out]: the bias as a grouped GEMM of a
// column of ones with the bias as [E, out, 1] weights, so the rows need no
// expert ids, the counts stay on the device and the bias gradient is each
// expert's column sum of the output gradient (grouped_gemm's weight gradient).
Tensor add_expert_bias(const Tensor& y, const Parameter* bias, const Tensor& counts) {
  if (bias == nullptr) return y;
  const Tensor b = bias->materialize();
  const Tensor weights = F::cast(F::reshape(b, {b.size(0), b.size(1), 1}), y.dtype());
  const Tensor ones = Tensor::full({y.size(0), 1}, 1.0, y.dtype(), y.device());
  return F::add(y, F::grouped_gemm(ones, weights, counts));
}

}  // namespace moe_expert_bias

Tensor GroupedExperts::forward(const Tensor& rows, const Tensor& counts) const {
  const ForwardScope scope(*this);
  const ExpertsFunction local = [this](const Tensor& r, const Tensor& c) { return compute(r, c); };
  return dispatcher_ ? dispatcher_(rows, counts, local) : compute(rows, counts);
}

Tensor GroupedExperts::compute(const Tensor& rows, const Tensor& counts) const {
  using moe_expert_bias::add_expert_bias;
  const Tensor gate = w1->materialize(), down = w2->materialize(), up = w3->materialize();
  // The grouped path, or the plain one: one ordinary GEMM per expert; float8 has its own.
  const bool grouped = config.expert_impl == ExpertImpl::grouped;
  const auto gemm = [&](const Tensor& x, const Tensor& w) {
    if (float8_) return F::float8_grouped_gemm(x, w, counts, *float8_);
    return grouped ? F::grouped_gemm(x, w, counts) : F::looped_grouped_gemm(x, w, counts);
  };
  const Tensor g = add_expert_bias(gemm(rows, gate), b1, counts);
  const Tensor u = add_expert_bias(gemm(rows, up), b3, counts);
  const Tensor hidden =
      config.activation == ExpertActivation::clamped_swiglu
          ? F::clamped_swiglu(g, u, static_cast<float>(config.swiglu_alpha), static_cast<float>(config.swiglu_limit))
          : F::swiglu(g, u);
  return add_expert_bias(gemm(hidden, down), b2, counts);
}

void GroupedExperts::set_init(double output_std) {
  w1->init = InitRule::truncated_normal(0.0, 0.02, -2.0, 2.0);
  w2->init = InitRule::truncated_normal(0.0, output_std, -2.0, 2.0);
  w3->init = InitRule::truncated_normal(0.0, output_std, -2.0, 2.0);
  for (Parameter* bias : {b1, b2, b3}) {
    if (bias != nullptr) bias->init = InitRule::constant(0.0);
  }
}

// ---- router ----

Router::Router(const MoEConfig& config, Device device) : config(config) {
  gate = register_module("gate", LinearConfig{config.dim, config.num_experts, config.router_bias}.build(device));
}

Router::Routing Router::route(const Tensor& x, const Tensor& bias) const {
  // Scores in f32 whatever the compute dtype, as Hugging Face's router does.
  const Tensor logits = F::cast(gate->forward(x), DType::f32);
  Routing routing;
  routing.scores = config.score == RouterScore::softmax ? F::softmax(logits) : F::sigmoid(logits);
  Tensor choice = bias.defined()
                      ? ops::add(routing.scores.detach(),
                                 bias.reshape({1, config.num_experts}).expand(routing.scores.shape()).contiguous())
                      : routing.scores.detach();
  if (config.num_expert_groups > 1) {
    // The choice carries no gradient: an op, not an autograd function.
    choice = ops::limit_to_groups(choice, config.num_expert_groups, config.num_limited_groups);
  }
  routing.indices = ops::topk(choice, config.top_k).indices;
  routing.weights = F::gather_columns(routing.scores, routing.indices);
  if (config.normalize_top_k) routing.weights = F::normalize_rows(routing.weights);
  if (config.route_scale != 1.0) routing.weights = F::scale(routing.weights, static_cast<float>(config.route_scale));
  return routing;
}

// ---- the block ----

MoE::MoE(const MoEConfig& config, Device device)
    : config(config),
      expert_bias(register_buffer("expert_bias", Tensor::zeros({config.num_experts}, DType::f32, device))),
      tokens_per_expert(register_buffer("tokens_per_expert", Tensor::zeros({config.num_experts}, DType::f32, device),
                                        /*persistent=*/false)) {
  TITAN_CHECK(config.dim > 0 && config.hidden_dim > 0 && config.num_experts > 0,
              "MoE: dim {}, hidden_dim {} and num_experts {} must be positive", config.dim, config.hidden_dim,
              config.num_experts);
  TITAN_CHECK(config.top_k >= 1 && config.top_k <= config.num_experts,
              "MoE: top_k {} must be between 1 and the number of experts ({})", config.top_k, config.num_experts);
  if (config.num_expert_groups > 1) {
    const int64_t groups = config.num_expert_groups, kept = config.num_limited_groups;
    TITAN_CHECK(config.num_experts % groups == 0 && config.num_experts / groups >= 2,
                "MoE: {} experts do not fall into {} groups of at least 2", config.num_experts, groups);
    TITAN_CHECK(kept >= 1 && kept <= groups && config.top_k <= kept * (config.num_experts / groups),
                "MoE: num_limited_groups {} must be in [1, {}] and hold top_k {} experts", kept, groups, config.top_k);
  }
  TITAN_CHECK(config.num_shared_experts >= 0, "MoE: num_shared_experts {} is negative", config.num_shared_experts);
  router = register_module("router", std::make_shared<Router>(config, device));
  experts = register_module("experts", std::make_shared<GroupedExperts>(config, device));
  if (config.num_shared_experts > 0) {
    shared_experts = register_module(
        "shared_experts", FeedForwardConfig{config.dim, config.num_shared_experts * config.hidden_dim}.build(device));
    if (config.shared_expert_gate) {
      shared_expert_gate = register_module("shared_expert_gate", LinearConfig{config.dim, 1}.build(device));
    }
  }
}

Tensor MoE::forward(const Tensor& input, const std::shared_ptr<MoEAuxLoss>& aux) const {
  const ForwardScope scope(*this);
  const Tensor in = pre_forward(input);
  const Shape& shape = in.shape();
  const Tensor x = F::reshape(in, {-1, config.dim});
  const int64_t tokens = x.size(0), k = config.top_k;
  const Router::Routing routing = router->route(x, config.load_balance_coeff > 0 ? *expert_bias : Tensor());
  const ops::ExpertOrder order = ops::expert_order(routing.indices, config.num_experts);
  ops::add_(*tokens_per_expert, order.counts.to(DType::f32));

  const Tensor rows = F::permute_tokens(x, order.order, order.inverse, k);
  const Tensor expert_rows = experts->forward(rows, order.counts);
  Tensor y = F::combine_experts(expert_rows, order.inverse, routing.weights);
  if (shared_experts) {
    Tensor shared = shared_experts->forward(x);
    if (shared_expert_gate) {
      // sigmoid in f32 (the routing op's dtype), broadcast over the features.
      const Tensor gate = F::cast(F::sigmoid(F::cast(shared_expert_gate->forward(x), DType::f32)), shared.dtype());
      shared = F::mul(shared, F::contiguous(F::expand(gate, shared.shape())));
    }
    y = F::add(y, shared);
  }

  if (aux != nullptr && config.aux_loss_coef > 0) {
    // This layer's share of the auxiliary loss (MoEAuxLoss): the fraction of
    // (token, slot) pairs per expert, and the mean score, whose gradient the
    // loss supplies through y.
    const Tensor ones = Tensor::full({1, tokens}, 1.0 / static_cast<double>(tokens), DType::f32, x.device());
    const Tensor mean_score = F::view(F::matmul(ones, routing.scores), {config.num_experts});
    aux->record(aux_slot, ops::scale(order.counts.to(DType::f32), 1.0f / static_cast<float>(tokens)),
                mean_score.detach());
    y = F::with_auxiliary_gradient(y, mean_score, [aux] { return aux->gradient(); });
  }
  return post_forward(F::reshape(y, shape));
}

void MoE::set_init(double output_std) {
  router->gate->set_init(0.02);
  experts->set_init(output_std);
  if (shared_experts) shared_experts->set_init(output_std);
  if (shared_expert_gate) shared_expert_gate->set_init(0.02);
}

void MoE::update_expert_bias(const Tensor& total_tokens_per_expert) {
  if (config.load_balance_coeff <= 0) return;
  // The sign of (mean - load), scaled, then centred: only differences between experts matter.
  const std::vector<float> load = total_tokens_per_expert.to_floats();
  double mean = 0.0;
  for (float value : load) mean += value;
  mean /= static_cast<double>(load.size());
  std::vector<float> step(load.size());
  double step_mean = 0.0;
  for (size_t e = 0; e < load.size(); ++e) {
    const double direction = load[e] < mean ? 1.0 : (load[e] > mean ? -1.0 : 0.0);
    step[e] = static_cast<float>(config.load_balance_coeff * direction);
    step_mean += step[e];
  }
  step_mean /= static_cast<double>(step.size());
  for (float& value : step) value -= static_cast<float>(step_mean);
  ops::add_(*expert_bias, Tensor::from_vector(step, {config.num_experts}).to(expert_bias->device()));
}

}  // namespace titan::nn
