// Records the device work a thread issues between begin() and end() and
// replays it with one launch and no host work (CUDA graphs). Backends that
// can record register a factory; the trainer's training.graph_capture uses
// it for the whole step after warm-up.
#pragma once

#include <functional>
#include <memory>

#include "titan/core/device.h"

namespace titan {

class StepRecorder {
 public:
  virtual ~StepRecorder() = default;
  // From here the current stream's work is recorded, not run. Device memory
  // allocated while recording comes from a pool of the recording's own, so
  // nothing else is ever handed memory a replay writes.
  virtual void begin() = 0;
  virtual void end() = 0;
  // Ends a recording abandoned by an error, leaving the stream usable.
  virtual void cancel() = 0;
  // Runs the recorded work again, on the current stream.
  virtual void replay() = 0;
};

using StepRecorderFactory = std::function<std::unique_ptr<StepRecorder>()>;
void register_step_recorder(DeviceType type, StepRecorderFactory factory);
// A recorder for `type`; titan::Error when that device cannot record.
std::unique_ptr<StepRecorder> make_step_recorder(DeviceType type);

}  // namespace titan
