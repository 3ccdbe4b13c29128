// A restricted unpickler. It reads pickle protocols 0-5 into PickleValues
// (pickle_value.h) and never runs anything: a global the pickle names is
// accepted only when `accepts(module, name)` says so, else reading stops
// with an error naming the file and the global. Opcodes that reach outside
// the stream (INST/OBJ's implicit calls are recorded like REDUCE; the copyreg
// extension registry and out-of-band buffers are refused), malformed or
// truncated streams, and MARKs nested deeper than kMaxPickleDepth fail the
// same way. Values may share or contain themselves: consumers bound their
// recursion. Errors are titan::Error naming `source`.
#pragma once

#include <functional>
#include <string>
#include <string_view>

#include "titan/checkpoint/pickle_value.h"

namespace titan::checkpoint {

using PickleGlobalFilter = std::function<bool(const std::string& module, const std::string& name)>;

Pickle read_pickle(std::string_view bytes, const PickleGlobalFilter& accepts, const std::string& source);

inline constexpr size_t kMaxPickleDepth = 200;

}  // namespace titan::checkpoint
