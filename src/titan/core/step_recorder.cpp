#include "titan/core/step_recorder.h"

#include <array>

#include "titan/core/error.h"

namespace titan {
namespace {

std::array<StepRecorderFactory, kNumDeviceTypes>& factories() {
  static std::array<StepRecorderFactory, kNumDeviceTypes> table;
  return table;
}

}  // namespace

void register_step_recorder(DeviceType type, StepRecorderFactory factory) {
  factories()[static_cast<size_t>(type)] = std::move(factory);
}

std::unique_ptr<StepRecorder> make_step_recorder(DeviceType type) {
  const StepRecorderFactory& factory = factories()[static_cast<size_t>(type)];
  TITAN_CHECK(factory != nullptr, "graph capture: device type {} cannot record steps (only CUDA can)",
              device_type_name(type));
  return factory();
}

}  // namespace titan
