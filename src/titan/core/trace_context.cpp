#include "titan/core/trace_context.h"

namespace titan::trace {
namespace {
thread_local const std::string* module_now = nullptr;
thread_local const char* op_now = nullptr;
}  // namespace

const std::string* current_module() { return module_now; }
const char* current_op() { return op_now; }

ModuleScope::ModuleScope(const std::string* fqn) : previous_(module_now) { module_now = fqn; }
ModuleScope::~ModuleScope() { module_now = previous_; }

OpScope::OpScope(const char* op) : previous_(op_now) { op_now = op; }
OpScope::~OpScope() { op_now = previous_; }

}  // namespace titan::trace
