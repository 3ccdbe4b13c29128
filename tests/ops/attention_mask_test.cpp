// CUDA attention-mask bias against the CPU one for every mask kind (causal,
// sliding window, packed documents as i32 or i64, their combinations) with as
// many queries as keys (training) and fewer (decoding with a KV cache). The
// bias is 0 or -inf, so the comparison is exact.
#include <string>
#include <vector>

#include "support/cuda.h"
#include "titan/ops/attention.h"

namespace titan::testing {
namespace attention_mask_test {

// Documents of uneven lengths, different in each batch row.
Tensor document_ids(int64_t batch, int64_t k_len, DType dtype) {
  std::vector<float> ids;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < k_len; ++j) ids.push_back(static_cast<float>((j * (b + 1)) / 11));
  }
  return Tensor::from_floats(ids, {batch, k_len}, dtype);
}

TEST(CudaAttentionMask, MatchesCpuForEveryMaskKind) {
  TITAN_REQUIRE_CUDA();
  const int64_t batch = 2, k_len = 37;
  for (int64_t q_len : {int64_t{37}, int64_t{5}, int64_t{1}}) {
    for (bool causal : {true, false}) {
      for (int64_t window : {int64_t{0}, int64_t{3}, int64_t{16}}) {
        for (DType doc_dtype : {DType::f32, DType::i32, DType::i64}) {  // f32: no documents
          SCOPED_TRACE("q_len " + std::to_string(q_len) + (causal ? " causal" : "") + " window " +
                       std::to_string(window) +
                       (doc_dtype == DType::f32 ? "" : std::string(" docs ") + dtype_name(doc_dtype)));
          ops::AttentionMask host_mask{causal, window, {}};
          ops::AttentionMask device_mask{causal, window, {}};
          if (doc_dtype != DType::f32) {
            host_mask.document_ids = document_ids(batch, k_len, doc_dtype);
            device_mask.document_ids = on_cuda(host_mask.document_ids);
          }
          const Tensor expected = ops::attention_mask_bias(host_mask, batch, q_len, k_len, Device::cpu());
          const Tensor actual = ops::attention_mask_bias(device_mask, batch, q_len, k_len, Device::cuda());
          ASSERT_TRUE(actual.device().is_cuda());
          // to_floats keeps -inf; equal vectors mean equal biases.
          EXPECT_EQ(on_cpu(actual).to_floats(), expected.to_floats());
        }
      }
    }
  }
}

// document_ids that are not contiguous are made so by the entry point.
TEST(CudaAttentionMask, StridedDocumentIds) {
  TITAN_REQUIRE_CUDA();
  const Tensor ids = document_ids(37, 2, DType::i64).transpose(0, 1);  // [2, 37], strided
  const ops::AttentionMask host_mask{true, 0, ids};
  const ops::AttentionMask device_strided{true, 0, on_cuda(document_ids(37, 2, DType::i64)).transpose(0, 1)};
  const Tensor expected = ops::attention_mask_bias(host_mask, 2, 37, 37, Device::cpu());
  EXPECT_EQ(on_cpu(ops::attention_mask_bias(device_strided, 2, 37, 37, Device::cuda())).to_floats(),
            expected.to_floats());
}

}  // namespace attention_mask_test
}  // namespace titan::testing
