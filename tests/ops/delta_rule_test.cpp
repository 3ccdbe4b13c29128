// The gated delta rule (ops/delta_rule.h), both algorithms, against:
//  - a float64 recurrence written here (the definition in the op's header,
//    token by token), on sequence lengths that are not multiples of the
//    chunk, with and without an initial state, with value heads sharing key
//    heads, with and without the q/k l2norm, with packed documents (restarts
//    inside a chunk, on a chunk's first token, on the second token);
//  - central finite differences of that float64 recurrence for the gradient
//    of every input (q, k, v, g, beta, initial state) through a loss that
//    reads both the output and the final state, also with packed documents;
//  - the float64 PyTorch recurrence of tests/reference/functional.py
//    (gated_delta_rule case of make_op_cases.py), forward and backward;
//  - itself: decoding token by token from the carried state equals the
//    chunked run over the whole sequence;
//  - on a GPU (CudaDeltaRule, skipped without one): the CUDA kernel against
//    the CPU recurrence.
//
// Tolerances (relative to the largest expected magnitude):
//  - f32: every quantity is a sum over at most T * Dk terms of size <= the
//    scale, accumulated in f32 (2^-24); the chunked form adds a triangular
//    solve over 64 rows whose entries are below 1 (|k| = 1, beta < 1, decays
//    <= 1). Observed errors are 1e-7 to 1e-6 of the scale; 2e-5 leaves 20x
//    margin, while scaling one decay term by 1.001 already exceeds it.
//  - gradients vs finite differences: the float64 differences are exact to
//    ~1e-9 (h = 1e-5, error ~h^2), so the bound is the op's f32 error: 2e-5.
//  - decoding vs prefill: both f32, the recurrence against the chunked form:
//    observed 6e-7, bound 1e-5.
//  - bf16: inputs and outputs rounded to 8 bits (2^-9 relative each), math in
//    f32: 2e-2 as for the other bf16 kernels (tests/support/reference.h);
//    observed 3e-3.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "support/cuda.h"
#include "support/expect_error.h"
#include "support/reference.h"
#include "titan/autograd/engine.h"
#include "titan/nn/functional.h"
#include "titan/ops/delta_rule.h"

namespace titan {
namespace delta_rule_test {

using ops::DeltaRuleAlgorithm;
using ops::DeltaRuleOptions;

struct Problem {
  int64_t batch, tokens, key_heads, value_heads, dk, dv;
  bool normalize = true;
  bool with_state = true;
  std::vector<int64_t> documents;  // [B, T] ids, empty: one stream
};

// Document ids for packed sequences: restarts at the given tokens of every row
// (and one more in the second row).
std::vector<int64_t> documents_at(const Problem& p, const std::vector<int64_t>& starts) {
  std::vector<int64_t> ids(static_cast<size_t>(p.batch * p.tokens), 0);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t t = 1; t < p.tokens; ++t) {
      bool restart = std::find(starts.begin(), starts.end(), t) != starts.end() || (b == 1 && t == p.tokens / 2);
      ids[b * p.tokens + t] = ids[b * p.tokens + t - 1] + (restart ? 1 : 0);
    }
  return ids;
}

// Inputs in float64 (holding values exact in the op's dtype).
struct Inputs {
  std::vector<double> q, k, v, g, beta, state;
};

struct Result {
  std::vector<double> out, state;
};

double round_to(double x, DType dtype) {
  const float f = static_cast<float>(x);
  return dtype == DType::bf16 ? static_cast<double>(bf16_to_float(float_to_bf16(f))) : static_cast<double>(f);
}

Inputs random_inputs(const Problem& p, uint64_t seed, DType dtype) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(-1.0, 1.0), positive(0.0, 1.0);
  auto fill = [&](int64_t n, auto draw) {
    std::vector<double> values(static_cast<size_t>(n));
    for (double& x : values) x = round_to(draw(), dtype);
    return values;
  };
  // Without the l2norm the state stays bounded only if beta |k|^2 < 2: small k then.
  const double k_scale = p.normalize ? 1.0 : 0.25;
  Inputs in;
  in.q = fill(p.batch * p.tokens * p.key_heads * p.dk, [&] { return unit(rng); });
  in.k = fill(p.batch * p.tokens * p.key_heads * p.dk, [&] { return k_scale * unit(rng); });
  in.v = fill(p.batch * p.tokens * p.value_heads * p.dv, [&] { return unit(rng); });
  in.g = fill(p.batch * p.tokens * p.value_heads, [&] { return -0.02 - 0.6 * positive(rng); });
  in.beta = fill(p.batch * p.tokens * p.value_heads, [&] { return 0.05 + 0.9 * positive(rng); });
  if (p.with_state) in.state = fill(p.batch * p.value_heads * p.dk * p.dv, [&] { return 0.5 * unit(rng); });
  return in;
}

// The recurrence of ops/delta_rule.h in float64.
Result reference(const Problem& p, const Inputs& in) {
  Result r;
  r.out.assign(static_cast<size_t>(p.batch * p.tokens * p.value_heads * p.dv), 0.0);
  r.state.assign(static_cast<size_t>(p.batch * p.value_heads * p.dk * p.dv), 0.0);
  const double scale = 1.0 / std::sqrt(static_cast<double>(p.dk));
  const int64_t group = p.value_heads / p.key_heads;
  std::vector<double> q(p.dk), k(p.dk), kv(p.dv);
  for (int64_t b = 0; b < p.batch; ++b)
    for (int64_t h = 0; h < p.value_heads; ++h) {
      double* s = r.state.data() + (b * p.value_heads + h) * p.dk * p.dv;
      if (!in.state.empty()) std::copy_n(in.state.data() + (b * p.value_heads + h) * p.dk * p.dv, p.dk * p.dv, s);
      for (int64_t t = 0; t < p.tokens; ++t) {
        if (!p.documents.empty() && t > 0 && p.documents[b * p.tokens + t] != p.documents[b * p.tokens + t - 1])
          std::fill(s, s + p.dk * p.dv, 0.0);  // a new document starts from a zero state
        const int64_t qk_at = ((b * p.tokens + t) * p.key_heads + h / group) * p.dk;
        const int64_t gate_at = (b * p.tokens + t) * p.value_heads + h;
        const double* v = in.v.data() + gate_at * p.dv;
        double qq = 0.0, kk = 0.0;
        for (int64_t i = 0; i < p.dk; ++i) {
          q[i] = in.q[qk_at + i];
          k[i] = in.k[qk_at + i];
          qq += q[i] * q[i];
          kk += k[i] * k[i];
        }
        const double rq = p.normalize ? 1.0 / std::sqrt(qq + 1e-6) : 1.0;
        const double rk = p.normalize ? 1.0 / std::sqrt(kk + 1e-6) : 1.0;
        for (int64_t i = 0; i < p.dk; ++i) {
          q[i] *= rq * scale;
          k[i] *= rk;
        }
        const double decay = std::exp(in.g[gate_at]), beta = in.beta[gate_at];
        for (int64_t j = 0; j < p.dv; ++j) {
          kv[j] = 0.0;
          for (int64_t i = 0; i < p.dk; ++i) kv[j] += s[i * p.dv + j] * k[i];
          kv[j] = beta * (v[j] - decay * kv[j]);
        }
        double* o = r.out.data() + gate_at * p.dv;
        for (int64_t i = 0; i < p.dk; ++i)
          for (int64_t j = 0; j < p.dv; ++j) {
            s[i * p.dv + j] = decay * s[i * p.dv + j] + k[i] * kv[j];
            o[j] += q[i] * s[i * p.dv + j];
          }
      }
    }
  return r;
}

Tensor to_tensor(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f32) {
  Tensor t = Tensor::empty(shape, DType::f32);
  for (size_t i = 0; i < values.size(); ++i) t.data<float>()[i] = static_cast<float>(values[i]);
  return dtype == DType::f32 ? t : t.to(dtype);
}

std::vector<double> to_vector(const Tensor& t) {
  const Tensor f = t.to(DType::f32).contiguous();
  std::vector<double> values(static_cast<size_t>(f.numel()));
  for (size_t i = 0; i < values.size(); ++i) values[i] = f.data<float>()[i];
  return values;
}

struct OpInputs {
  Tensor q, k, v, g, beta, state, documents;
};

OpInputs op_inputs(const Problem& p, const Inputs& in, DType dtype) {
  return {to_tensor(in.q, {p.batch, p.tokens, p.key_heads, p.dk}, dtype),
          to_tensor(in.k, {p.batch, p.tokens, p.key_heads, p.dk}, dtype),
          to_tensor(in.v, {p.batch, p.tokens, p.value_heads, p.dv}, dtype),
          to_tensor(in.g, {p.batch, p.tokens, p.value_heads}),
          to_tensor(in.beta, {p.batch, p.tokens, p.value_heads}, dtype),
          p.with_state ? to_tensor(in.state, {p.batch, p.value_heads, p.dk, p.dv}) : Tensor(),
          p.documents.empty() ? Tensor() : Tensor::from_vector(p.documents, {p.batch, p.tokens})};
}

// max |actual - expected| <= tol * max |expected|.
::testing::AssertionResult close(const std::vector<double>& actual, const std::vector<double>& expected, double tol) {
  if (actual.size() != expected.size()) return ::testing::AssertionFailure() << "size mismatch";
  double scale = 0.0, worst = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < expected.size(); ++i) scale = std::max(scale, std::abs(expected[i]));
  for (size_t i = 0; i < expected.size(); ++i)
    if (std::abs(actual[i] - expected[i]) > worst) worst = std::abs(actual[i] - expected[i]), at = i;
  if (worst <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "max error " << worst << " at " << at << " (" << actual[at] << " vs "
                                       << expected[at] << "), bound " << tol * scale;
}

DeltaRuleOptions options_for(DeltaRuleAlgorithm algorithm, int64_t chunk, bool normalize,
                             const Tensor& documents = Tensor()) {
  DeltaRuleOptions options;
  options.document_ids = documents;
  options.algorithm = algorithm;
  options.chunk_size = chunk;
  options.normalize_qk = normalize;
  return options;
}

const DeltaRuleAlgorithm kAlgorithms[] = {DeltaRuleAlgorithm::chunked, DeltaRuleAlgorithm::recurrent};
const char* name_of(DeltaRuleAlgorithm a) { return a == DeltaRuleAlgorithm::chunked ? "chunked" : "recurrent"; }

TEST(DeltaRule, ForwardMatchesFloat64Recurrence) {
  struct Case {
    int64_t tokens, chunk, key_heads, value_heads;
    bool with_state, normalize;
    std::vector<int64_t> restarts;  // packed documents: tokens that start one (empty: one stream)
  };
  // Lengths below, at and past one chunk, partial last chunks; GQA-like sharing (1 key head, 2 value heads);
  // packed documents starting inside chunks, on a chunk's first token and on the second token.
  const Case cases[] = {{1, 64, 2, 2, false, true, {}},          {5, 64, 1, 2, true, true, {}},
                        {64, 64, 2, 2, true, true, {}},          {100, 64, 1, 2, false, true, {}},
                        {130, 64, 1, 2, true, true, {}},         {37, 16, 2, 4, true, false, {}},
                        {50, 7, 1, 1, true, true, {}},           {130, 64, 1, 2, true, true, {3, 64, 100}},
                        {37, 16, 2, 2, true, false, {1, 16, 20}}};
  for (const Case& c : cases) {
    Problem p{2, c.tokens, c.key_heads, c.value_heads, 16, 12, c.normalize, c.with_state, {}};
    if (!c.restarts.empty()) p.documents = documents_at(p, c.restarts);
    SCOPED_TRACE("T=" + std::to_string(c.tokens) + " chunk=" + std::to_string(c.chunk) +
                 " documents=" + std::to_string(c.restarts.size()));
    const Inputs in = random_inputs(p, 7 + static_cast<uint64_t>(c.tokens), DType::f32);
    const Result expected = reference(p, in);
    const OpInputs x = op_inputs(p, in, DType::f32);
    for (DeltaRuleAlgorithm algorithm : kAlgorithms) {
      SCOPED_TRACE(name_of(algorithm));
      // i32 ids in one case, i64 in the other.
      const Tensor ids = x.documents.defined() && c.tokens == 37 ? x.documents.to(DType::i32) : x.documents;
      const ops::DeltaRuleOutput out =
          ops::gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, x.state, options_for(algorithm, c.chunk, c.normalize, ids));
      EXPECT_EQ(out.out.dtype(), DType::f32);
      EXPECT_TRUE(close(to_vector(out.out), expected.out, 2e-5));
      EXPECT_TRUE(close(to_vector(out.final_state), expected.state, 2e-5));
    }
  }
}

TEST(DeltaRule, Bf16WithinBounds) {
  const Problem p{1, 90, 1, 2, 16, 16, true, true, {}};
  const Inputs in = random_inputs(p, 11, DType::bf16);
  const Result expected = reference(p, in);
  const OpInputs x = op_inputs(p, in, DType::bf16);
  for (DeltaRuleAlgorithm algorithm : kAlgorithms) {
    SCOPED_TRACE(name_of(algorithm));
    const ops::DeltaRuleOutput out =
        ops::gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, x.state, options_for(algorithm, 32, true));
    EXPECT_EQ(out.out.dtype(), DType::bf16);
    EXPECT_TRUE(close(to_vector(out.out), expected.out, 2e-2));
    EXPECT_TRUE(close(to_vector(out.final_state), expected.state, 2e-5));  // the state stays f32
    const ops::DeltaRuleGrads grads =
        ops::gated_delta_rule_backward(to_tensor(in.v, {p.batch, p.tokens, p.value_heads, p.dv}, DType::bf16), Tensor(),
                                       x.q, x.k, x.v, x.g, x.beta, x.state, options_for(algorithm, 32, true));
    EXPECT_EQ(grads.grad_q.dtype(), DType::bf16);
    EXPECT_EQ(grads.grad_g.dtype(), DType::f32);
    EXPECT_EQ(grads.grad_beta.dtype(), DType::bf16);
  }
}

// loss = sum(out * w_out) + sum(final_state * w_state), in float64.
double reference_loss(const Problem& p, const Inputs& in, const std::vector<double>& w_out,
                      const std::vector<double>& w_state) {
  const Result r = reference(p, in);
  double loss = 0.0;
  for (size_t i = 0; i < w_out.size(); ++i) loss += r.out[i] * w_out[i];
  for (size_t i = 0; i < w_state.size(); ++i) loss += r.state[i] * w_state[i];
  return loss;
}

TEST(DeltaRule, GradientsMatchFiniteDifferences) {
  for (int variant = 0; variant < 3; ++variant) {
    const bool normalize = variant != 1, documents = variant == 2;
    // 11 tokens in chunks of 4: two whole chunks and a partial one; documents
    // restart inside the first chunk and on the third's first token.
    Problem p{1, 11, 1, 2, 4, 3, normalize, true, {}};
    if (documents) p.documents = documents_at(p, {3, 8});
    SCOPED_TRACE(std::string(normalize ? "l2norm" : "no l2norm") + (documents ? ", documents" : ""));
    const Inputs in = random_inputs(p, 3, DType::f32);
    std::mt19937_64 rng(5);
    std::uniform_real_distribution<double> unit(-1.0, 1.0);
    std::vector<double> w_out(static_cast<size_t>(p.batch * p.tokens * p.value_heads * p.dv));
    std::vector<double> w_state(static_cast<size_t>(p.batch * p.value_heads * p.dk * p.dv));
    for (double& w : w_out) w = round_to(unit(rng), DType::f32);
    for (double& w : w_state) w = round_to(unit(rng), DType::f32);
    // The finite differences, input by input.
    std::vector<std::vector<double>> numeric;
    for (std::vector<double> Inputs::*field :
         {&Inputs::q, &Inputs::k, &Inputs::v, &Inputs::g, &Inputs::beta, &Inputs::state}) {
      Inputs moved = in;
      std::vector<double> d((in.*field).size());
      for (size_t i = 0; i < d.size(); ++i) {
        const double h = 1e-5, x = (in.*field)[i];
        (moved.*field)[i] = x + h;
        const double up = reference_loss(p, moved, w_out, w_state);
        (moved.*field)[i] = x - h;
        const double down = reference_loss(p, moved, w_out, w_state);
        (moved.*field)[i] = x;
        d[i] = (up - down) / (2 * h);
      }
      numeric.push_back(d);
    }
    const OpInputs x = op_inputs(p, in, DType::f32);
    for (DeltaRuleAlgorithm algorithm : kAlgorithms) {
      SCOPED_TRACE(name_of(algorithm));
      const ops::DeltaRuleGrads grads =
          ops::gated_delta_rule_backward(to_tensor(w_out, {p.batch, p.tokens, p.value_heads, p.dv}),
                                         to_tensor(w_state, {p.batch, p.value_heads, p.dk, p.dv}), x.q, x.k, x.v, x.g,
                                         x.beta, x.state, options_for(algorithm, 4, normalize, x.documents));
      const char* names[] = {"q", "k", "v", "g", "beta", "initial_state"};
      const Tensor analytic[] = {grads.grad_q, grads.grad_k,    grads.grad_v,
                                 grads.grad_g, grads.grad_beta, grads.grad_initial_state};
      for (int i = 0; i < 6; ++i) {
        SCOPED_TRACE(names[i]);
        EXPECT_TRUE(close(to_vector(analytic[i]), numeric[static_cast<size_t>(i)], 2e-5));
      }
    }
  }
}

TEST(DeltaRule, MatchesPyTorchReference) {
  testing::ReferenceCase ref("gated_delta_rule");
  const Tensor q = ref.get("q"), k = ref.get("k"), v = ref.get("v"), g = ref.get("g"), beta = ref.get("beta");
  const Tensor state = ref.get("initial_state");
  const double tol = 2e-5;
  for (DeltaRuleAlgorithm algorithm : kAlgorithms) {
    SCOPED_TRACE(name_of(algorithm));
    const DeltaRuleOptions options = options_for(algorithm, ref.meta_int("chunk_size"), true);
    const ops::DeltaRuleOutput out = ops::gated_delta_rule(q, k, v, g, beta, state, options);
    EXPECT_TRUE(close(to_vector(out.out), to_vector(ref.get("out")), tol));
    EXPECT_TRUE(close(to_vector(out.final_state), to_vector(ref.get("final_state")), tol));
    const ops::DeltaRuleGrads grads = ops::gated_delta_rule_backward(ref.get("grad_out"), ref.get("grad_final_state"),
                                                                     q, k, v, g, beta, state, options);
    EXPECT_TRUE(close(to_vector(grads.grad_q), to_vector(ref.get("grad_q")), tol));
    EXPECT_TRUE(close(to_vector(grads.grad_k), to_vector(ref.get("grad_k")), tol));
    EXPECT_TRUE(close(to_vector(grads.grad_v), to_vector(ref.get("grad_v")), tol));
    EXPECT_TRUE(close(to_vector(grads.grad_g), to_vector(ref.get("grad_g")), tol));
    EXPECT_TRUE(close(to_vector(grads.grad_beta), to_vector(ref.get("grad_beta")), tol));
    EXPECT_TRUE(close(to_vector(grads.grad_initial_state), to_vector(ref.get("grad_initial_state")), tol));
  }
}

// Decoding token by token from the carried state (F::gated_delta_rule_step)
// gives the chunked prefill's outputs and final state.
TEST(DeltaRule, DecodingStepsMatchChunkedPrefill) {
  const Problem p{2, 70, 1, 2, 16, 8, true, true, {}};
  const Inputs in = random_inputs(p, 21, DType::f32);
  const OpInputs x = op_inputs(p, in, DType::f32);
  const F::GatedDeltaRuleResult whole = F::gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, x.state);
  Tensor state = x.state;
  std::vector<double> stepped(static_cast<size_t>(whole.out.numel()));
  for (int64_t t = 0; t < p.tokens; ++t) {
    auto at = [&](const Tensor& full) { return full.narrow(1, t, 1).contiguous(); };
    const F::GatedDeltaRuleResult step =
        F::gated_delta_rule_step(at(x.q), at(x.k), at(x.v), at(x.g), at(x.beta), state);
    state = step.final_state;
    const std::vector<double> out = to_vector(step.out);  // [B, 1, Hv, Dv]
    const int64_t row = p.value_heads * p.dv;
    for (int64_t b = 0; b < p.batch; ++b)
      std::copy_n(out.data() + b * row, row, stepped.data() + (b * p.tokens + t) * row);
  }
  EXPECT_TRUE(close(stepped, to_vector(whole.out), 1e-5));
  EXPECT_TRUE(close(to_vector(state), to_vector(whole.final_state), 1e-5));
}

// F::gated_delta_rule records a node whose gradients are the op's backward.
TEST(DeltaRule, AutogradMatchesOpBackward) {
  const Problem p{1, 20, 1, 1, 8, 8, true, true, {}};
  const Inputs in = random_inputs(p, 9, DType::f32);
  OpInputs x = op_inputs(p, in, DType::f32);
  for (Tensor* t : {&x.q, &x.k, &x.v, &x.g, &x.beta, &x.state}) t->set_requires_grad(true);
  const F::GatedDeltaRuleResult r = F::gated_delta_rule(x.q, x.k, x.v, x.g, x.beta, x.state);
  const Tensor grad_out = to_tensor(in.v, {p.batch, p.tokens, p.value_heads, p.dv});
  autograd::backward({r.out}, {grad_out});
  const ops::DeltaRuleGrads expected =
      ops::gated_delta_rule_backward(grad_out, Tensor(), x.q, x.k, x.v, x.g, x.beta, x.state);
  EXPECT_TRUE(close(to_vector(x.q.grad()), to_vector(expected.grad_q), 0.0));
  EXPECT_TRUE(close(to_vector(x.g.grad()), to_vector(expected.grad_g), 0.0));
  EXPECT_TRUE(close(to_vector(x.state.grad()), to_vector(expected.grad_initial_state), 0.0));
}

TEST(DeltaRule, BadInputsNameTheTensor) {
  const Problem p{1, 4, 2, 3, 8, 8, true, false, {}};
  const Tensor q = Tensor::zeros({1, 4, 2, 8}), v = Tensor::zeros({1, 4, 3, 8}), gate = Tensor::zeros({1, 4, 3});
  testing::expect_error([&] { ops::gated_delta_rule(q, q, v, gate, gate, Tensor()); },
                        {"gated_delta_rule", "value heads (3)", "key heads (2)"});
  const Tensor v4 = Tensor::zeros({1, 4, 4, 8});
  testing::expect_error([&] { ops::gated_delta_rule(q, q, v4, gate, gate, Tensor()); }, {"g is [1, 4, 3]"});
  const Tensor gate4 = Tensor::zeros({1, 4, 4});
  testing::expect_error(
      [&] {
        ops::gated_delta_rule(q, q, v4, gate4, gate4, Tensor::zeros({1, 4, 8, 4}));
      },
      {"initial_state"});
  DeltaRuleOptions options;
  options.document_ids = Tensor::zeros({1, 5}, DType::i64);
  testing::expect_error([&] { ops::gated_delta_rule(q, q, v4, gate4, gate4, Tensor(), options); },
                        {"document_ids is [1, 5]"});
  (void)p;
}

}  // namespace delta_rule_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace delta_rule_test {

// Each CUDA algorithm (the recurrence, and the chunked kernels of
// delta_rule_chunked.cu) against the CPU's same algorithm, with the f32
// bound of the CPU tests (different summation orders, same math) and one
// bf16 step for bf16 outputs.
class CudaDeltaRule : public ::testing::TestWithParam<std::tuple<DType, ops::DeltaRuleAlgorithm>> {};

TEST_P(CudaDeltaRule, ForwardAndBackwardMatchCpu) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = std::get<0>(GetParam());
  // 2 value heads per key head, Dv over one 32-column tile, T over three segments of 16.
  const int64_t b = 2, t = 37, hk = 1, hv = 2, dk = 16, dv = 40;
  const Tensor q = random_cpu({b, t, hk, dk}, dtype, 1), k = random_cpu({b, t, hk, dk}, dtype, 2);
  const Tensor v = random_cpu({b, t, hv, dv}, dtype, 3), grad_out = random_cpu({b, t, hv, dv}, dtype, 4);
  const Tensor g = random_cpu({b, t, hv}, DType::f32, 5, -0.6, -0.02),
               beta = random_cpu({b, t, hv}, dtype, 6, 0.05, 0.95);
  const Tensor state = random_cpu({b, hv, dk, dv}, DType::f32, 7),
               grad_state = random_cpu({b, hv, dk, dv}, DType::f32, 8);
  ops::DeltaRuleOptions options;
  options.algorithm = std::get<1>(GetParam());
  options.chunk_size = 16;  // chunked: three chunks, the last one partial
  // Packed documents: restarts at tokens 5 and 16 (a chunk boundary) of both rows.
  std::vector<int64_t> ids(static_cast<size_t>(b * t), 0);
  for (int64_t row = 0; row < b; ++row)
    for (int64_t token = 0; token < t; ++token) ids[row * t + token] = (token >= 5) + (token >= 16);
  options.document_ids = Tensor::from_vector(ids, {b, t});
  ops::DeltaRuleOptions cuda_options = options;
  cuda_options.document_ids = on_cuda(options.document_ids);
  const ops::DeltaRuleOutput expected = ops::gated_delta_rule(q, k, v, g, beta, state, options);
  const ops::DeltaRuleOutput actual = ops::gated_delta_rule(on_cuda(q), on_cuda(k), on_cuda(v), on_cuda(g),
                                                            on_cuda(beta), on_cuda(state), cuda_options);
  const double rtol = dtype == DType::bf16 ? 1.0 / 64 : 2e-5;
  EXPECT_TRUE(all_close(on_cpu(actual.out), expected.out, rtol * max_abs(expected.out), rtol));
  EXPECT_TRUE(all_close(on_cpu(actual.final_state), expected.final_state, 2e-5 * max_abs(expected.final_state), 2e-5));
  const ops::DeltaRuleGrads want =
      ops::gated_delta_rule_backward(grad_out, grad_state, q, k, v, g, beta, state, options);
  const ops::DeltaRuleGrads got =
      ops::gated_delta_rule_backward(on_cuda(grad_out), on_cuda(grad_state), on_cuda(q), on_cuda(k), on_cuda(v),
                                     on_cuda(g), on_cuda(beta), on_cuda(state), cuda_options);
  for (const auto& [a, e] :
       {std::pair{got.grad_q, want.grad_q}, std::pair{got.grad_k, want.grad_k}, std::pair{got.grad_v, want.grad_v},
        std::pair{got.grad_g, want.grad_g}, std::pair{got.grad_beta, want.grad_beta},
        std::pair{got.grad_initial_state, want.grad_initial_state}}) {
    const double tol = e.dtype() == DType::bf16 ? 1.0 / 64 : 2e-5;
    EXPECT_TRUE(all_close(on_cpu(a), e, tol * max_abs(e), tol));
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaDeltaRule,
                         ::testing::Combine(::testing::Values(DType::f32, DType::bf16),
                                            ::testing::Values(ops::DeltaRuleAlgorithm::recurrent,
                                                              ops::DeltaRuleAlgorithm::chunked)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) == ops::DeltaRuleAlgorithm::chunked ? "_chunked"
                                                                                               : "_recurrent");
                         });

}  // namespace delta_rule_test
}  // namespace titan::testing
