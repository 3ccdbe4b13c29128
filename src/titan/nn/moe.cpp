#include "titan/nn/moe.h"

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
  set_init(0.02);
}

Tensor GroupedExperts::forward(const Tensor& rows, const Tensor& counts) const {
  const ForwardScope scope(*this);
  const ExpertsFunction local = [this](const Tensor& r, const Tensor& c) { return compute(r, c); };
  return dispatcher_ ? dispatcher_(rows, counts, local) : compute(rows, counts);
}

Tensor GroupedExperts::compute(const Tensor& rows, const Tensor& counts) const {
  const Tensor gate = w1->materialize(), down = w2->materialize(), up = w3->materialize();
  if (config.expert_impl == ExpertImpl::grouped) {
    const Tensor hidden = F::swiglu(F::grouped_gemm(rows, gate, counts), F::grouped_gemm(rows, up, counts));
    return F::grouped_gemm(hidden, down, counts);
  }
  // The plain path: one ordinary GEMM per expert.
  const Tensor hidden = F::swiglu(F::looped_grouped_gemm(rows, gate, counts), F::looped_grouped_gemm(rows, up, counts));
  return F::looped_grouped_gemm(hidden, down, counts);
}

void GroupedExperts::set_init(double output_std) {
  w1->init = InitRule::truncated_normal(0.0, 0.02, -2.0, 2.0);
  w2->init = InitRule::truncated_normal(0.0, output_std, -2.0, 2.0);
  w3->init = InitRule::truncated_normal(0.0, output_std, -2.0, 2.0);
}

// ---- router ----

Router::Router(const MoEConfig& config, Device device) : config(config) {
  gate = register_module("gate", LinearConfig{config.dim, config.num_experts}.build(device));
}

Router::Routing Router::route(const Tensor& x, const Tensor& bias) const {
  // Scores in f32 whatever the compute dtype, as Hugging Face's router does.
  const Tensor logits = F::cast(gate->forward(x), DType::f32);
  Routing routing;
  routing.scores = config.score == RouterScore::softmax ? F::softmax(logits) : F::sigmoid(logits);
  const Tensor choice =
      bias.defined() ? ops::add(routing.scores.detach(),
                                bias.reshape({1, config.num_experts}).expand(routing.scores.shape()).contiguous())
                     : routing.scores.detach();
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
  TITAN_CHECK(config.num_shared_experts >= 0, "MoE: num_shared_experts {} is negative", config.num_shared_experts);
  router = register_module("router", std::make_shared<Router>(config, device));
  experts = register_module("experts", std::make_shared<GroupedExperts>(config, device));
  if (config.num_shared_experts > 0) {
    shared_experts = register_module(
        "shared_experts", FeedForwardConfig{config.dim, config.num_shared_experts * config.hidden_dim}.build(device));
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
  if (shared_experts) y = F::add(y, shared_experts->forward(x));

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
