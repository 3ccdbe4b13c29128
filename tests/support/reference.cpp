#include "support/reference.h"

#include <cmath>
#include <cstdlib>

namespace titan::testing {

std::string reference_dir() {
  const char* dir = std::getenv("TITAN_REFERENCE_DIR");
  return dir != nullptr ? dir : TITAN_DEFAULT_REFERENCE_DIR;
}

ReferenceCase::ReferenceCase(const std::string& name)
    : reader_(std::make_unique<checkpoint::SafetensorsReader>(reference_dir() + "/" + name + ".safetensors")) {}

Tensor ReferenceCase::get(const std::string& tensor) const { return reader_->read(tensor); }

Tensor ReferenceCase::get(const std::string& tensor, DType dtype) const { return reader_->read(tensor).to(dtype); }

std::string ReferenceCase::meta(const std::string& key) const {
  auto found = reader_->header().metadata.find(key);
  TITAN_CHECK(found != reader_->header().metadata.end(), "{}: no metadata '{}'", reader_->path(), key);
  return found->second;
}

std::vector<std::string> ReferenceCase::tensor_names() const {
  std::vector<std::string> names;
  for (const auto& entry : reader_->header().entries) names.push_back(entry.name);
  return names;
}

bool ReferenceCase::has_meta(const std::string& key) const { return reader_->header().metadata.contains(key); }

double max_abs(const Tensor& tensor) {
  double best = 0.0;
  for (float v : tensor.to_floats()) best = std::max(best, std::fabs(static_cast<double>(v)));
  return best;
}

double relative_l2_error(const Tensor& actual, const Tensor& expected) {
  const std::vector<float> a = actual.to_floats(), e = expected.to_floats();
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < a.size() && i < e.size(); ++i) {
    diff += (static_cast<double>(a[i]) - e[i]) * (static_cast<double>(a[i]) - e[i]);
    norm += static_cast<double>(e[i]) * e[i];
  }
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, double atol, double rtol) {
  if (!actual.defined() || !expected.defined()) return ::testing::AssertionFailure() << "undefined tensor";
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " vs expected "
                                         << shape_str(expected.shape());
  }
  const std::vector<float> a = actual.to_floats(), e = expected.to_floats();
  size_t worst = 0, failures = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double error = std::fabs(static_cast<double>(a[i]) - e[i]);
    const double allowed = atol + rtol * std::fabs(static_cast<double>(e[i]));
    const bool bad = !(error <= allowed);  // NaN counts as bad
    if (bad) ++failures;
    const double excess = std::isnan(error) ? 1e300 : error - allowed;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << failures << " of " << a.size() << " elements differ (atol " << atol
                                       << ", rtol " << rtol << "); worst at flat index " << worst << ": " << a[worst]
                                       << " vs " << e[worst] << "; relative L2 error "
                                       << relative_l2_error(actual, expected);
}

Tolerance tolerance_for(DType dtype, const Tensor& expected) {
  const double scale = std::max(max_abs(expected), 1e-30);
  if (dtype == DType::bf16) return {2e-2 * scale, 2e-2};
  return {2e-5 * scale, 1e-4};
}

}  // namespace titan::testing
