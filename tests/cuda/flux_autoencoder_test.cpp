// FLUX.1's autoencoder (models/flux/flux_autoencoder.h) on CUDA against the
// same model on the CPU: a tiny randomly initialised configuration (that of
// tests/models/flux_autoencoder_test.cpp, whose CPU cases hold the maths to
// PyTorch's), its encoder's moments, the scaled latent, a sampled latent and
// the decoded image, in f32 and bf16. Every op of the forward runs on the GPU:
// conv2d's im2col and group norm (ops/cuda/conv2d_im2col.cu, group_norm.cu),
// the GEMMs, SiLU, adds, the mid block's attention and the nearest upsampling's
// copies. Here rather than beside the CPU cases so that scripts/gpu_check.sh
// runs it with the other CUDA tests (titan_cuda_tests).
//
// Tolerance: the two backends sum in different orders. f32: 1e-4 of the norm
// (each of the 11 encoder and 13 decoder convs is one f32 sum of at most 145
// terms, about 1e-6 apart). bf16: the CPU test's 3% bound against PyTorch,
// since each backend rounds every conv's output to 8 bits on its own.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "support/cuda.h"
#include "titan/autograd/grad_mode.h"
#include "titan/core/generator.h"
#include "titan/models/flux/flux_autoencoder.h"
#include "titan/nn/initialize.h"

namespace titan::testing {
namespace flux_autoencoder_cuda_test {

using models::flux::AutoEncoder;
using models::flux::AutoEncoderConfig;

// tests/models/flux_autoencoder_test.cpp's tiny(): 3 levels of 8, 16, 16 channels, 4 groups.
AutoEncoderConfig tiny() {
  AutoEncoderConfig config;
  config.resolution = 16;
  config.ch = 8;
  config.ch_mult = {1, 2, 2};
  config.num_res_blocks = 1;
  config.z_channels = 4;
  config.num_groups = 4;
  return config;
}

std::shared_ptr<AutoEncoder> tiny_model(Device device, DType dtype) {
  auto model = std::make_shared<AutoEncoder>(tiny(), Device::cpu());
  nn::initialize(*model, 11);
  model->to(dtype);
  model->to(device);
  return model;
}

class CudaFluxAutoencoder : public ::testing::TestWithParam<DType> {};

TEST_P(CudaFluxAutoencoder, EncodeAndDecodeMatchCpu) {
  TITAN_REQUIRE_CUDA();
  const DType dtype = GetParam();
  const double bound = dtype == DType::f32 ? 1e-4 : 3e-2;
  const auto cpu = tiny_model(Device::cpu(), dtype), cuda = tiny_model(Device::cuda(), dtype);
  const Tensor image = random_cpu({2, 3, 16, 12}, dtype, 12);
  {
    const autograd::NoGradGuard frozen;
    const Tensor want = cpu->encoder->forward(image), got = cuda->encoder->forward(on_cuda(image));
    EXPECT_EQ(got.device().type, DeviceType::cuda);
    EXPECT_LT(relative_l2_error(on_cpu(got).to(DType::f32), want.to(DType::f32)), bound) << "moments";
  }
  const Tensor latent = cpu->encode(image), cuda_latent = cuda->encode(on_cuda(image));
  EXPECT_EQ(cuda_latent.shape(), (Shape{2, 4, 4, 3}));
  EXPECT_LT(relative_l2_error(on_cpu(cuda_latent).to(DType::f32), latent.to(DType::f32)), bound) << "latent";
  Generator cpu_noise(5), cuda_noise(5);
  const Tensor sample = cpu->encode(image, cpu_noise), cuda_sample = cuda->encode(on_cuda(image), cuda_noise);
  EXPECT_EQ(cuda_sample.device().type, DeviceType::cuda);
  EXPECT_LT(relative_l2_error(on_cpu(cuda_sample).to(DType::f32), sample.to(DType::f32)), bound) << "sample";
  const Tensor decoded = cpu->decode(latent), cuda_decoded = cuda->decode(on_cuda(latent));
  EXPECT_EQ(cuda_decoded.shape(), (Shape{2, 3, 16, 12}));
  EXPECT_LT(relative_l2_error(on_cpu(cuda_decoded).to(DType::f32), decoded.to(DType::f32)), bound) << "decoded";
}

INSTANTIATE_TEST_SUITE_P(DTypes, CudaFluxAutoencoder, ::testing::Values(DType::f32, DType::bf16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace flux_autoencoder_cuda_test
}  // namespace titan::testing
