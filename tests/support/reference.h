// Loading the PyTorch reference cases written by tests/reference/make_op_cases.py
// (at build time, into TITAN_REFERENCE_DIR) and comparing results against them.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "titan/checkpoint/safetensors.h"
#include "titan/core/tensor.h"

namespace titan::testing {

// The folder the reference cases are in (TITAN_REFERENCE_DIR, else the build's);
// some cases are folders of their own there (a Hugging Face model folder).
std::string reference_dir();

class ReferenceCase {
 public:
  explicit ReferenceCase(const std::string& name);
  bool has(const std::string& tensor) const { return reader_->contains(tensor); }
  std::vector<std::string> tensor_names() const;
  // The tensor as stored (f32 values, i64 ids), optionally cast to `dtype`.
  Tensor get(const std::string& tensor) const;
  Tensor get(const std::string& tensor, DType dtype) const;
  std::string meta(const std::string& key) const;
  bool has_meta(const std::string& key) const;
  double meta_double(const std::string& key) const { return std::stod(meta(key)); }
  int64_t meta_int(const std::string& key) const { return std::stoll(meta(key)); }

 private:
  std::unique_ptr<checkpoint::SafetensorsReader> reader_;
};

// |actual - expected| <= atol + rtol * |expected| elementwise (shapes must
// match); the failure message names the worst element and the error norms.
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double atol, double rtol);
// ||actual - expected||_2 / ||expected||_2.
double relative_l2_error(const Tensor& actual, const Tensor& expected);
double max_abs(const Tensor& tensor);

// Tolerances for comparing a kernel against the float64 reference on
// bf16-representable inputs, relative to the scale of the expected values:
//  - f32: rounding error grows like sqrt(K) * 2^-24 for K-term sums; 2e-5 of
//    the output scale leaves ~20x margin for K <= 1024 while any wrong term is
//    orders of magnitude larger.
//  - bf16: the output itself is rounded to 8 significant bits (2^-9 = 0.2%
//    relative), and a chain of a few such roundings stays under 2%.
struct Tolerance {
  double atol;
  double rtol;
};
Tolerance tolerance_for(DType dtype, const Tensor& expected);

// A kernel's output against the reference: it has `dtype`, and its values are
// within tolerance_for(dtype) of the float64 expected ones.
inline void expect_matches_reference(const Tensor& actual, const Tensor& expected, DType dtype) {
  const Tolerance tol = tolerance_for(dtype, expected);
  EXPECT_EQ(actual.dtype(), dtype);
  EXPECT_TRUE(all_close(actual, expected, tol.atol, tol.rtol));
}

}  // namespace titan::testing

namespace titan {
// Readable names for parameterised tests (gtest finds these by ADL).
inline void PrintTo(DType dtype, std::ostream* out) { *out << dtype_name(dtype); }
}  // namespace titan
