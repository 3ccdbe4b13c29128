// ops::conv2d (ops/conv2d.h) against a naive float64 loop written here from
// the definition: strides 1 and 2, symmetric and asymmetric zero padding, a
// non-square kernel, with and without bias, the im2col scratch cut into
// several blocks of output rows (a short last one included), in f32 and
// bf16. The inputs are bf16-representable, so the loop sees the kernel's
// exact inputs in both dtypes and the tolerance (tests/support/reference.h)
// is that of one f32 sum, or of one bf16 rounding of the output.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "support/cuda.h"
#include "support/expect_error.h"
#include "support/reference.h"
#include "titan/ops/conv2d.h"

namespace titan {
namespace conv2d_test {

using testing::random_cpu;

struct Case {
  const char* name;
  int64_t batch, in_channels, out_channels, height, width, kernel_h, kernel_w;
  int64_t stride;
  ops::Conv2dPadding padding;
  bool bias;
  int64_t scratch_elements = int64_t{1} << 22;
};

std::vector<double> doubles(const Tensor& t) {
  const std::vector<float> f = t.to(DType::f32).to_floats();
  return {f.begin(), f.end()};
}

// y[b, o, i, j] = bias[o] + sum_{c,u,v} w[o, c, u, v] x[b, c, i s + u - top, j s + v - left], zero outside.
Tensor naive_conv2d(const Case& p, const Tensor& x, const Tensor& w, const Tensor& bias) {
  const std::vector<double> xs = doubles(x), ws = doubles(w), bs = p.bias ? doubles(bias) : std::vector<double>();
  const int64_t out_h = (p.height + p.padding.top + p.padding.bottom - p.kernel_h) / p.stride + 1;
  const int64_t out_w = (p.width + p.padding.left + p.padding.right - p.kernel_w) / p.stride + 1;
  std::vector<float> y;
  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t o = 0; o < p.out_channels; ++o) {
      for (int64_t i = 0; i < out_h; ++i) {
        for (int64_t j = 0; j < out_w; ++j) {
          double sum = p.bias ? bs[o] : 0.0;
          for (int64_t c = 0; c < p.in_channels; ++c) {
            for (int64_t u = 0; u < p.kernel_h; ++u) {
              for (int64_t v = 0; v < p.kernel_w; ++v) {
                const int64_t r = i * p.stride + u - p.padding.top, s = j * p.stride + v - p.padding.left;
                if (r < 0 || r >= p.height || s < 0 || s >= p.width) continue;
                sum += ws[((o * p.in_channels + c) * p.kernel_h + u) * p.kernel_w + v] *
                       xs[((b * p.in_channels + c) * p.height + r) * p.width + s];
              }
            }
          }
          y.push_back(static_cast<float>(sum));
        }
      }
    }
  }
  return Tensor::from_floats(y, {p.batch, p.out_channels, out_h, out_w});
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"3x3 stride 1 padded 1", 2, 5, 7, 9, 6, 3, 3, 1, {1, 1, 1, 1}, true},
      {"3x3 stride 2 padded bottom and right (FLUX's downsampler)", 2, 4, 4, 10, 7, 3, 3, 2, {0, 1, 0, 1}, true},
      {"5x3 stride 2 padded 2, no bias", 1, 3, 6, 11, 8, 5, 3, 2, {2, 2, 2, 2}, false},
      {"1x1 stride 1", 2, 6, 5, 4, 3, 1, 1, 1, {}, true},
      {"uneven padding on every side", 1, 2, 3, 5, 6, 3, 2, 1, {2, 0, 1, 3}, true},
      // 46 (+1) column rows x 9 output columns per output row: blocks of 2
      // rows, the last of the 9 rows alone.
      {"3x3 in blocks of 2 output rows", 2, 5, 4, 9, 9, 3, 3, 1, {1, 1, 1, 1}, true, 2 * 46 * 9},
  };
  return all;
}

class Conv2dTest : public ::testing::TestWithParam<DType> {};

TEST_P(Conv2dTest, MatchesFloat64Loop) {
  const DType dtype = GetParam();
  uint64_t seed = 100;
  for (const Case& p : cases()) {
    SCOPED_TRACE(p.name);
    const Tensor x = random_cpu({p.batch, p.in_channels, p.height, p.width}, dtype, ++seed, -2, 2);
    const Tensor w = random_cpu({p.out_channels, p.in_channels, p.kernel_h, p.kernel_w}, dtype, ++seed);
    const Tensor bias = p.bias ? random_cpu({p.out_channels}, dtype, ++seed) : Tensor();
    const Tensor y = ops::conv2d(
        x, w, bias,
        ops::Conv2dOptions{.stride = p.stride, .padding = p.padding, .scratch_elements = p.scratch_elements});
    testing::expect_matches_reference(y, naive_conv2d(p, x, w, bias), dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, Conv2dTest, ::testing::Values(DType::f32, DType::bf16));

// The padding is where the loop says: the same conv padded on the other sides
// gives other numbers (a kernel that ignored the asymmetry would pass the
// symmetric cases above).
TEST(Conv2d, AsymmetricPaddingMoves) {
  const Tensor x = random_cpu({1, 2, 6, 6}, DType::f32, 7);
  const Tensor w = random_cpu({2, 2, 3, 3}, DType::f32, 8);
  const ops::Conv2dOptions bottom_right{.stride = 2, .padding = {0, 1, 0, 1}};
  const ops::Conv2dOptions top_left{.stride = 2, .padding = {1, 0, 1, 0}};
  const Tensor a = ops::conv2d(x, w, Tensor(), bottom_right), b = ops::conv2d(x, w, Tensor(), top_left);
  ASSERT_EQ(a.shape(), (Shape{1, 2, 3, 3}));
  EXPECT_GT(testing::relative_l2_error(a, b), 0.1);
}

TEST(Conv2d, BadArgumentsNameTheOp) {
  const Tensor x = random_cpu({1, 3, 4, 4}, DType::f32, 9);
  testing::expect_error(
      [&] {
        ops::conv2d(x, random_cpu({2, 4, 3, 3}, DType::f32, 10), Tensor());
      },
      {"conv2d", "weight", "[2, 4, 3, 3]"});
  testing::expect_error(
      [&] {
        ops::conv2d(x, random_cpu({2, 3, 3, 3}, DType::f32, 10), random_cpu({3}, DType::f32, 11));
      },
      {"conv2d", "bias"});
  testing::expect_error(
      [&] {
        ops::conv2d(x, random_cpu({2, 3, 5, 5}, DType::f32, 10), Tensor());
      },
      {"conv2d", "larger than the padded"});
  testing::expect_error(
      [&] {
        ops::conv2d(x, random_cpu({2, 3, 3, 3}, DType::f32, 10), Tensor(), ops::Conv2dOptions{.stride = 0});
      },
      {"conv2d", "stride"});
  testing::expect_error([&] { ops::conv2d(x, random_cpu({2, 3, 3, 3}, DType::bf16, 10), Tensor()); }, {"conv2d"});
}

}  // namespace conv2d_test
}  // namespace titan

// ---- CUDA against the CPU backend: suites Cuda*, run once (ops.cuda.*) ----
namespace titan::testing {
namespace conv2d_cuda_test {

using titan::conv2d_test::Case;
using titan::conv2d_test::cases;

// The CUDA im2col (ops/cuda/conv2d_im2col.cu) fills the same columns as the
// CPU kernel bit for bit (both only copy values, zeros and ones): every case
// above, with and without the ones row, the whole image at once and a block
// of output rows starting mid-image, on the last image of the batch. Then the
// whole conv (im2col and the cuBLASLt GEMM) against the CPU conv, within the
// CPU tests' tolerance (one f32 sum, or one bf16 rounding of the output).
class CudaConv2d : public ::testing::TestWithParam<DType> {};

TEST_P(CudaConv2d, Im2colMatchesCpuBitwise) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  uint64_t seed = 300;
  for (const Case& p : cases()) {
    const Tensor x = random_cpu({p.batch, p.in_channels, p.height, p.width}, dtype, ++seed, -2, 2);
    const Tensor x_cuda = on_cuda(x);
    const int64_t out_h = (p.height + p.padding.top + p.padding.bottom - p.kernel_h) / p.stride + 1;
    const int64_t out_w = (p.width + p.padding.left + p.padding.right - p.kernel_w) / p.stride + 1;
    const int64_t k = p.in_channels * p.kernel_h * p.kernel_w;
    for (const bool ones_row : {false, true}) {
      for (const int64_t first_row : {int64_t{0}, out_h / 2}) {
        SCOPED_TRACE(std::string(p.name) + (ones_row ? ", ones row" : "") + ", from output row " +
                     std::to_string(first_row));
        const ops::Im2colWindow window{.image = p.batch - 1,
                                       .first_row = first_row,
                                       .rows = out_h - first_row,
                                       .kernel_h = p.kernel_h,
                                       .kernel_w = p.kernel_w,
                                       .out_w = out_w,
                                       .stride = p.stride,
                                       .padding = p.padding,
                                       .ones_row = ones_row};
        const Shape shape{k + (ones_row ? 1 : 0), window.rows * out_w};
        const Tensor want = Tensor::empty(shape, dtype), got = Tensor::empty(shape, dtype, Device::cuda());
        ops::im2col_kernels(Device::cpu(), want, x, window);
        ops::im2col_kernels(Device::cuda(), got, x_cuda, window);
        const Tensor back = on_cpu(got);
        ASSERT_EQ(back.nbytes(), want.nbytes());
        EXPECT_EQ(std::memcmp(back.data_ptr(), want.data_ptr(), want.nbytes()), 0);
      }
    }
  }
}

TEST_P(CudaConv2d, ConvMatchesCpu) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  uint64_t seed = 400;
  for (const Case& p : cases()) {
    SCOPED_TRACE(p.name);
    const Tensor x = random_cpu({p.batch, p.in_channels, p.height, p.width}, dtype, ++seed, -2, 2);
    const Tensor w = random_cpu({p.out_channels, p.in_channels, p.kernel_h, p.kernel_w}, dtype, ++seed);
    const Tensor bias = p.bias ? random_cpu({p.out_channels}, dtype, ++seed) : Tensor();
    const ops::Conv2dOptions options{.stride = p.stride, .padding = p.padding, .scratch_elements = p.scratch_elements};
    const Tensor want = ops::conv2d(x, w, bias, options);
    const Tensor got = ops::conv2d(on_cuda(x), on_cuda(w), p.bias ? on_cuda(bias) : Tensor(), options);
    EXPECT_EQ(got.device().type, DeviceType::cuda);
    expect_matches_reference(on_cpu(got), want, dtype);
  }
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaConv2d, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace conv2d_cuda_test
}  // namespace titan::testing
