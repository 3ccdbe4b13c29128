// What this thread is doing, for the tools that look inside a run (the
// profiler, the memory snapshot): the op being dispatched and the module whose
// forward (or whose backward node) runs. Model code opens a ModuleScope at the
// top of each forward; ops::Op opens an OpScope around each kernel call. Both
// only move a thread-local pointer, so they cost nothing worth measuring when
// no tool is recording.
#pragma once

#include <string>

namespace titan::trace {

// The fully-qualified name of the innermost module running on this thread
// ("layers.0.attention.wq"); nullptr outside every module. The string is the
// module's own and lives as long as the module.
const std::string* current_module();
// The op whose kernel runs on this thread; nullptr outside every op.
const char* current_op();

class ModuleScope {
 public:
  explicit ModuleScope(const std::string* fqn);
  ~ModuleScope();
  ModuleScope(const ModuleScope&) = delete;
  ModuleScope& operator=(const ModuleScope&) = delete;

 private:
  const std::string* previous_;
};

class OpScope {
 public:
  explicit OpScope(const char* op);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  const char* previous_;
};

}  // namespace titan::trace
