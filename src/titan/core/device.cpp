#include "titan/core/device.h"

#include <charconv>

#include "titan/core/error.h"

namespace titan {

const char* device_type_name(DeviceType type) {
  switch (type) {
    case DeviceType::cpu:
      return "cpu";
    case DeviceType::cuda:
      return "cuda";
    case DeviceType::meta:
      return "meta";
  }
  return "invalid";
}

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "meta") return meta();
  if (text == "cuda") return cuda(0);
  if (text.starts_with("cuda:")) {
    int index = -1;
    std::string_view digits = text.substr(5);
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
    if (error == std::errc() && end == digits.data() + digits.size() && index >= 0) return cuda(index);
  }
  fail("unknown device '{}' (expected cpu, cuda, cuda:N or meta)", text);
}

std::string Device::str() const {
  if (type == DeviceType::cuda) return fmt::format("cuda:{}", index);
  return device_type_name(type);
}

}  // namespace titan
