// Where a tensor's bytes live: the host (cpu), an NVIDIA GPU (cuda:N), or
// nowhere at all (meta: shapes and dtypes only, for memory estimation and
// for building a model before its sharded weights are materialised).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace titan {

enum class DeviceType : uint8_t { cpu, cuda, meta };
inline constexpr int kNumDeviceTypes = 3;

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static Device cpu() { return {DeviceType::cpu, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  static Device meta() { return {DeviceType::meta, 0}; }
  // "cpu", "cuda", "cuda:1", "meta"; throws titan::Error on anything else.
  static Device parse(std::string_view text);

  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool is_meta() const { return type == DeviceType::meta; }
  std::string str() const;
  bool operator==(const Device&) const = default;
};

const char* device_type_name(DeviceType type);

}  // namespace titan
