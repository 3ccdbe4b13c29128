#include "titan/checkpoint/nonfinite_weights.h"

#include <cstdio>
#include <cstring>

#include "titan/core/error.h"

namespace titan::checkpoint {

namespace {

// NaN and Inf counts of n values, read from their bits (no conversion, so a
// bf16 model is scanned in place): an all-ones exponent is Inf with a zero
// mantissa and NaN otherwise. fp8 e4m3 has no Inf and one NaN pattern.
template <typename Word>
void count_ieee(const Word* words, int64_t n, Word exponent, Word mantissa, int64_t& nan, int64_t& inf) {
  int64_t nans = 0, infs = 0;
#pragma omp parallel for reduction(+ : nans, infs) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const Word w = words[i];
    const bool special = (w & exponent) == exponent;
    nans += special && (w & mantissa) != 0 ? 1 : 0;
    infs += special && (w & mantissa) == 0 ? 1 : 0;
  }
  nan += nans;
  inf += infs;
}

void count(const Tensor& host, int64_t& nan, int64_t& inf) {
  const int64_t n = host.numel();
  switch (host.dtype()) {
    case DType::f32:
      count_ieee(static_cast<const uint32_t*>(host.data_ptr()), n, uint32_t{0x7f800000u}, uint32_t{0x007fffffu}, nan,
                 inf);
      return;
    case DType::bf16:
      count_ieee(static_cast<const uint16_t*>(host.data_ptr()), n, uint16_t{0x7f80u}, uint16_t{0x007fu}, nan, inf);
      return;
    case DType::f16:
      count_ieee(static_cast<const uint16_t*>(host.data_ptr()), n, uint16_t{0x7c00u}, uint16_t{0x03ffu}, nan, inf);
      return;
    case DType::f8e5m2:
      count_ieee(static_cast<const uint8_t*>(host.data_ptr()), n, uint8_t{0x7cu}, uint8_t{0x03u}, nan, inf);
      return;
    case DType::f8e4m3: {
      const auto* bytes = static_cast<const uint8_t*>(host.data_ptr());
      for (int64_t i = 0; i < n; ++i) nan += (bytes[i] & 0x7fu) == 0x7fu ? 1 : 0;
      return;
    }
    default:
      return;  // integers are always finite
  }
}

}  // namespace

std::vector<NonFiniteTensor> find_nonfinite(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<NonFiniteTensor> found;
  for (const auto& [name, tensor] : tensors) {
    if (!tensor.defined() || tensor.numel() == 0 || tensor.device().is_meta()) continue;
    const Tensor host = tensor.to(Device::cpu()).contiguous();
    NonFiniteTensor entry{name, 0, 0, tensor.numel()};
    count(host, entry.nan, entry.inf);
    if (entry.nan + entry.inf > 0) found.push_back(entry);
  }
  return found;
}

void check_finite_weights(const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& source,
                          bool allow, const std::string& allow_hint) {
  report_nonfinite(find_nonfinite(tensors), source, allow, allow_hint);
}

void report_nonfinite(const std::vector<NonFiniteTensor>& found, const std::string& source, bool allow,
                      const std::string& allow_hint) {
  if (found.empty()) return;
  std::string list;
  for (size_t i = 0; i < found.size(); ++i) {
    if (i == 10) {
      list += fmt::format("\n  ... and {} more", found.size() - i);
      break;
    }
    list += fmt::format("\n  {}: {} NaN, {} Inf of {} values", found[i].name, found[i].nan, found[i].inf,
                        found[i].elements);
  }
  const std::string what = fmt::format("{}: {} tensor(s) hold NaN or Inf:{}", source, found.size(), list);
  if (!allow) {
    fail(
        "{}\nthese weights would make every result that uses them NaN; repair the file, or pass {} to load them "
        "anyway",
        what, allow_hint);
  }
  std::fprintf(stderr, "titan: warning: %s\n(loaded anyway: %s)\n", what.c_str(), allow_hint.c_str());
  std::fflush(stderr);
}

}  // namespace titan::checkpoint
