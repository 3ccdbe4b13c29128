#include "titan/models/flux/flux_layers.h"

#include <algorithm>
#include <cmath>

#include "titan/core/error.h"
#include "titan/nn/functional.h"

namespace titan::models::flux {

// ---- functions ----

Tensor layer_norm_without_affine(const Tensor& x, float eps) {
  // In f32 whatever x's dtype, rounded once at the end (PyTorch's bf16
  // LayerNorm also computes in f32): a bf16 mean would centre x off by its
  // rounding. The mean is a product with a row of 1/width, broadcast back.
  const Tensor x32 = F::cast(x, DType::f32);
  const int64_t width = x.size(-1);
  const Tensor averaging = Tensor::full({1, width}, 1.0 / static_cast<double>(width), DType::f32, x.device());
  const Tensor centred = F::sub(x32, F::expand(F::linear(x32, averaging), x.shape()));
  const Tensor unit_scale = Tensor::full({width}, 1.0, DType::f32, x.device());
  return F::cast(F::rms_norm(centred, unit_scale, eps), x.dtype());
}

Tensor gelu_tanh(const Tensor& x) {
  // No GELU op of its own yet: GeGLU's gate half with an up projection of
  // ones is exactly gelu_tanh(x), at the cost of a tensor of ones.
  return F::geglu(x, Tensor::full(x.shape(), 1.0, x.dtype(), x.device()));
}

namespace {

// v [B, D] -> [B, L, D] (a broadcast view; its gradient sums over the tokens).
Tensor over_tokens(const Tensor& v, const Tensor& like) {
  TITAN_CHECK(v.dim() == 2 && like.dim() == 3 && v.size(0) == like.size(0) && v.size(1) == like.size(2),
              "flux: a per-sample vector {} does not match the tokens {}", shape_str(v.shape()),
              shape_str(like.shape()));
  return F::expand(F::reshape(v, {v.size(0), 1, v.size(1)}), like.shape());
}

}  // namespace

Tensor modulate(const Tensor& x, const Tensor& shift, const Tensor& scale) {
  return F::add(F::add(x, F::mul(x, over_tokens(scale, x))), over_tokens(shift, x));
}

Tensor gated_residual(const Tensor& x, const Tensor& gate, const Tensor& y) {
  return F::add(x, F::mul(over_tokens(gate, y), y));
}

Tensor timestep_embedding(const Tensor& t, int64_t dim, double max_period, double time_factor) {
  TITAN_CHECK(t.dim() == 1 && dim > 0, "flux: timestep_embedding takes t [N] and a positive width (got {}, {})",
              shape_str(t.shape()), dim);
  const std::vector<float> times = t.to_floats();
  const int64_t n = t.size(0), half = dim / 2;
  std::vector<float> values(static_cast<size_t>(n * dim), 0.0f);
  for (int64_t row = 0; row < n; ++row) {
    for (int64_t i = 0; i < half; ++i) {
      const double frequency = std::exp(-std::log(max_period) * static_cast<double>(i) / static_cast<double>(half));
      // In f32, as the reference rounds its arguments (t * factor and the frequencies are f32 there).
      const float argument =
          static_cast<float>(time_factor * times[static_cast<size_t>(row)]) * static_cast<float>(frequency);
      values[static_cast<size_t>(row * dim + i)] = std::cos(argument);
      values[static_cast<size_t>(row * dim + half + i)] = std::sin(argument);
    }
  }
  return Tensor::from_floats(values, {n, dim}).to(t.device());
}

AxesRope axes_rope(const Tensor& ids, const std::array<int64_t, 3>& axes_dim, double theta) {
  TITAN_CHECK(ids.dim() == 3 && ids.size(2) == 3 && (ids.dtype() == DType::i64 || ids.dtype() == DType::i32),
              "flux: position ids must be [B, L, 3] integers (got {} {})", shape_str(ids.shape()),
              dtype_name(ids.dtype()));
  AxesRope rope;
  for (size_t axis = 0; axis < 3; ++axis) {
    const Tensor positions = ids.select(2, static_cast<int64_t>(axis)).contiguous().to(DType::i64);
    const std::vector<int64_t> values = positions.to_ints();
    int64_t largest = 0;
    for (const int64_t p : values) {
      TITAN_CHECK(p >= 0, "flux: position ids must not be negative (axis {} holds {})", axis, p);
      largest = std::max(largest, p);
    }
    rope.tables[axis] = ops::rope_table(axes_dim[axis], largest + 1, theta, ops::RopeScaling{}, ids.device());
    rope.positions[axis] = positions;
    rope.widths[axis] = axes_dim[axis];
  }
  return rope;
}

Tensor apply_axes_rope(const Tensor& x, const AxesRope& rope) {
  TITAN_CHECK(x.dim() == 4 && x.size(3) == rope.widths[0] + rope.widths[1] + rope.widths[2],
              "flux: rope over axes of widths {}, {}, {} applied to {}", rope.widths[0], rope.widths[1], rope.widths[2],
              shape_str(x.shape()));
  Tensor out;
  int64_t start = 0;
  for (size_t axis = 0; axis < 3; ++axis) {
    const Tensor part = F::contiguous(F::narrow(x, 3, start, rope.widths[axis]));
    const Tensor rotated = F::rope(part, rope.tables[axis], rope.positions[axis], ops::RopeStyle::interleaved);
    out = out.defined() ? F::concat(out, rotated, 3) : rotated;
    start += rope.widths[axis];
  }
  return out;
}

// ---- modules ----

void xavier_uniform(nn::Linear& linear) {
  const double bound = std::sqrt(6.0 / static_cast<double>(linear.config.in_features + linear.config.out_features));
  linear.weight->init = nn::InitRule::uniform(-bound, bound);
  if (linear.bias) linear.bias->init = nn::InitRule::constant(0.0);
}

namespace {

void zero_init(nn::Linear& linear) {
  linear.weight->init = nn::InitRule::constant(0.0);
  if (linear.bias) linear.bias->init = nn::InitRule::constant(0.0);
}

std::shared_ptr<nn::Linear> make_linear(int64_t in, int64_t out, bool bias, Device device) {
  return nn::LinearConfig{in, out, bias}.build(device);
}

}  // namespace

Modulation::Modulation(int64_t hidden_size, bool is_double, Device device)
    : is_double(is_double),
      lin(register_module("lin", make_linear(hidden_size, (is_double ? 6 : 3) * hidden_size, true, device))) {
  // Zero: every block starts as the identity (gates of zero).
  zero_init(*lin);
}

std::vector<Modulated> Modulation::forward(const Tensor& vec) const {
  const ForwardScope scope(*this);
  const Tensor out = lin->forward(F::silu(vec));
  const int64_t width = lin->config.out_features / (is_double ? 6 : 3);
  const auto piece = [&](int64_t i) { return F::contiguous(F::narrow(out, 1, i * width, width)); };
  std::vector<Modulated> branches{{piece(0), piece(1), piece(2)}};
  if (is_double) branches.push_back({piece(3), piece(4), piece(5)});
  return branches;
}

MLPEmbedder::MLPEmbedder(int64_t in_dim, int64_t hidden_dim, Device device)
    : in_layer(register_module("in_layer", make_linear(in_dim, hidden_dim, true, device))),
      out_layer(register_module("out_layer", make_linear(hidden_dim, hidden_dim, true, device))) {}

Tensor MLPEmbedder::forward(const Tensor& x) const {
  const ForwardScope scope(*this);
  return out_layer->forward(F::silu(in_layer->forward(x)));
}

QKNorm::QKNorm(int64_t head_dim, double eps, Device device)
    : query_norm(register_module("query_norm", nn::RMSNormConfig{.dim = head_dim, .eps = eps}.build(device))),
      key_norm(register_module("key_norm", nn::RMSNormConfig{.dim = head_dim, .eps = eps}.build(device))) {}

namespace {

// qkv [B, L, 3 * H * D] (q, k, v side by side, each heads-major) -> the
// three [B, L, H, D], q and k normalised.
HeadsQKV split_heads(const Tensor& qkv, int64_t heads, const QKNorm& norm) {
  const int64_t b = qkv.size(0), l = qkv.size(1), width = qkv.size(2) / 3;
  const auto part = [&](int64_t i) {
    return F::view(F::contiguous(F::narrow(qkv, 2, i * width, width)), {b, l, heads, width / heads});
  };
  return HeadsQKV{norm.query_norm->forward(part(0)), norm.key_norm->forward(part(1)), part(2)};
}

}  // namespace

FluxAttention::FluxAttention(const FluxConfig& config, Device device)
    : num_heads(config.num_heads),
      qkv(register_module("qkv", make_linear(config.hidden_size, 3 * config.hidden_size, config.qkv_bias, device))),
      norm(register_module("norm", std::make_shared<QKNorm>(config.head_dim(), config.qk_norm_eps, device))),
      proj(register_module("proj", make_linear(config.hidden_size, config.hidden_size, true, device))) {
  xavier_uniform(*qkv);
  xavier_uniform(*proj);
}

HeadsQKV FluxAttention::qkv_heads(const Tensor& x) const { return split_heads(qkv->forward(x), num_heads, *norm); }

FluxMLP::FluxMLP(int64_t hidden_size, int64_t mlp_hidden_dim, Device device)
    : in(register_module("0", make_linear(hidden_size, mlp_hidden_dim, true, device))),
      out(register_module("2", make_linear(mlp_hidden_dim, hidden_size, true, device))) {
  xavier_uniform(*in);
  xavier_uniform(*out);
}

Tensor FluxMLP::forward(const Tensor& x) const {
  const ForwardScope scope(*this);
  return out->forward(gelu_tanh(in->forward(x)));
}

Tensor joint_attention(const HeadsQKV& heads, const AxesRope& rope, const nn::AttentionCore& core) {
  const Tensor q = apply_axes_rope(heads.q, rope), k = apply_axes_rope(heads.k, rope);
  const int64_t b = q.size(0), l = q.size(1), h = q.size(2), d = q.size(3);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const Tensor v = F::contiguous(heads.v);
  const ops::AttentionMask no_mask(false);
  const Tensor out = core ? core(q, k, v, no_mask, scale) : F::scaled_dot_product_attention(q, k, v, no_mask, scale);
  return F::view(out, {b, l, h * d});
}

DoubleStreamBlock::DoubleStreamBlock(const FluxConfig& config, Device device)
    : config(config),
      img_mod(register_module("img_mod", std::make_shared<Modulation>(config.hidden_size, true, device))),
      img_attn(register_module("img_attn", std::make_shared<FluxAttention>(config, device))),
      img_mlp(
          register_module("img_mlp", std::make_shared<FluxMLP>(config.hidden_size, config.mlp_hidden_dim(), device))),
      txt_mod(register_module("txt_mod", std::make_shared<Modulation>(config.hidden_size, true, device))),
      txt_attn(register_module("txt_attn", std::make_shared<FluxAttention>(config, device))),
      txt_mlp(
          register_module("txt_mlp", std::make_shared<FluxMLP>(config.hidden_size, config.mlp_hidden_dim(), device))) {}

Tensor pack_stream(const Tensor& vec, const Tensor& tokens) {
  return F::concat(F::view(vec, {vec.size(0), 1, vec.size(1)}), tokens, 1);
}

Tensor stream_vec(const Tensor& stream) {
  return F::view(F::contiguous(F::narrow(stream, 1, 0, 1)), {stream.size(0), stream.size(2)});
}

Tensor stream_tokens(const Tensor& stream, int64_t start, int64_t count) {
  return F::contiguous(F::narrow(stream, 1, 1 + start, count));
}

Tensor DoubleStreamBlock::forward(const Tensor& stream, int64_t text_tokens, const AxesRope& rope) const {
  const ForwardScope scope(*this);
  // Captured by value: a runner may call the body again in backward, after this returns.
  return run([this, text_tokens, rope](const Tensor& in) { return compute(in, text_tokens, rope); }, stream);
}

Tensor DoubleStreamBlock::compute(const Tensor& stream, int64_t text_tokens, const AxesRope& rope) const {
  const Tensor vec = stream_vec(stream);
  const Tensor txt = stream_tokens(stream, 0, text_tokens);
  const Tensor img = stream_tokens(stream, text_tokens, stream.size(1) - 1 - text_tokens);
  const auto eps = static_cast<float>(config.norm_eps);
  const std::vector<Modulated> img_m = img_mod->forward(vec), txt_m = txt_mod->forward(vec);

  const HeadsQKV img_heads =
      img_attn->qkv_heads(modulate(layer_norm_without_affine(img, eps), img_m[0].shift, img_m[0].scale));
  const HeadsQKV txt_heads =
      txt_attn->qkv_heads(modulate(layer_norm_without_affine(txt, eps), txt_m[0].shift, txt_m[0].scale));
  // One attention over the text tokens then the image tokens.
  const HeadsQKV joint{F::concat(txt_heads.q, img_heads.q, 1), F::concat(txt_heads.k, img_heads.k, 1),
                       F::concat(txt_heads.v, img_heads.v, 1)};
  const Tensor attention = joint_attention(joint, rope, core_);
  const Tensor txt_attention = F::contiguous(F::narrow(attention, 1, 0, text_tokens));
  const Tensor img_attention = F::contiguous(F::narrow(attention, 1, text_tokens, img.size(1)));

  Tensor img_out = gated_residual(img, img_m[0].gate, img_attn->proj->forward(img_attention));
  img_out = gated_residual(
      img_out, img_m[1].gate,
      img_mlp->forward(modulate(layer_norm_without_affine(img_out, eps), img_m[1].shift, img_m[1].scale)));
  Tensor txt_out = gated_residual(txt, txt_m[0].gate, txt_attn->proj->forward(txt_attention));
  txt_out = gated_residual(
      txt_out, txt_m[1].gate,
      txt_mlp->forward(modulate(layer_norm_without_affine(txt_out, eps), txt_m[1].shift, txt_m[1].scale)));
  return pack_stream(vec, F::concat(txt_out, img_out, 1));
}

SingleStreamBlock::SingleStreamBlock(const FluxConfig& config, Device device)
    : config(config),
      linear1(register_module(
          "linear1", make_linear(config.hidden_size, 3 * config.hidden_size + config.mlp_hidden_dim(), true, device))),
      linear2(register_module(
          "linear2", make_linear(config.hidden_size + config.mlp_hidden_dim(), config.hidden_size, true, device))),
      norm(register_module("norm", std::make_shared<QKNorm>(config.head_dim(), config.qk_norm_eps, device))),
      modulation(register_module("modulation", std::make_shared<Modulation>(config.hidden_size, false, device))) {
  xavier_uniform(*linear1);
  xavier_uniform(*linear2);
}

Tensor SingleStreamBlock::forward(const Tensor& stream, const AxesRope& rope) const {
  const ForwardScope scope(*this);
  return run([this, rope](const Tensor& in) { return compute(in, rope); }, stream);
}

Tensor SingleStreamBlock::compute(const Tensor& stream, const AxesRope& rope) const {
  const Tensor vec = stream_vec(stream);
  const Tensor x = stream_tokens(stream, 0, stream.size(1) - 1);
  const Modulated m = modulation->forward(vec)[0];
  const Tensor projected =
      linear1->forward(modulate(layer_norm_without_affine(x, static_cast<float>(config.norm_eps)), m.shift, m.scale));
  const int64_t attention_width = 3 * config.hidden_size;
  const Tensor qkv = F::contiguous(F::narrow(projected, 2, 0, attention_width));
  const Tensor mlp = F::contiguous(F::narrow(projected, 2, attention_width, config.mlp_hidden_dim()));
  const Tensor attention = joint_attention(split_heads(qkv, config.num_heads, *norm), rope, core_);
  return pack_stream(vec, gated_residual(x, m.gate, linear2->forward(F::concat(attention, gelu_tanh(mlp), 2))));
}

AdaLayerNormModulation::AdaLayerNormModulation(int64_t hidden_size, Device device)
    : linear(register_module("1", make_linear(hidden_size, 2 * hidden_size, true, device))) {
  zero_init(*linear);
}

LastLayer::LastLayer(const FluxConfig& config, Device device)
    : config(config),
      linear(register_module("linear", make_linear(config.hidden_size, config.out_channels, true, device))),
      adaLN_modulation(
          register_module("adaLN_modulation", std::make_shared<AdaLayerNormModulation>(config.hidden_size, device))) {
  // Zero: the untrained model predicts a velocity of zero.
  zero_init(*linear);
}

Tensor LastLayer::forward(const Tensor& x, const Tensor& vec) const {
  const ForwardScope scope(*this);
  const Tensor shift_scale = adaLN_modulation->linear->forward(F::silu(vec));
  const int64_t width = config.hidden_size;
  const Tensor shift = F::contiguous(F::narrow(shift_scale, 1, 0, width));
  const Tensor scale = F::contiguous(F::narrow(shift_scale, 1, width, width));
  return linear->forward(modulate(layer_norm_without_affine(x, static_cast<float>(config.norm_eps)), shift, scale));
}

}  // namespace titan::models::flux
