// Writes Python pickles (protocol 2, what torch.save uses) from C++: the
// torch.save archives and the Distributed Checkpoint metadata titan writes
// for PyTorch to read. A stack-machine builder, one call per opcode group:
// the caller pushes values in the order Python's pickler would, so the
// bytes unpickle to the same objects. Nothing is memoised (no value is
// shared), which Python's unpickler does not require.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace titan::checkpoint {

class PickleWriter {
 public:
  PickleWriter();  // PROTO 2

  PickleWriter& none();
  PickleWriter& boolean(bool value);
  PickleWriter& integer(int64_t value);
  PickleWriter& floating(double value);
  PickleWriter& text(std::string_view utf8);
  // Raw bytes: BINBYTES, a protocol 3 opcode every Python 3 unpickler reads.
  PickleWriter& bytes(std::string_view data);
  // The object `module.name` (a class, a function or a module-level value such as torch.float32).
  PickleWriter& global(std::string_view module, std::string_view name);

  // Containers: mark(), push the items, then close them.
  PickleWriter& mark();
  PickleWriter& tuple();  // the items since mark() as a tuple
  PickleWriter& empty_tuple();
  PickleWriter& empty_dict();
  PickleWriter& set_items();  // key, value pairs since mark() into the dict below the mark
  PickleWriter& empty_list();
  PickleWriter& append_items();  // items since mark() onto the list below the mark

  // callable, argument tuple -> callable(*arguments)
  PickleWriter& reduce();
  // class, argument tuple -> class.__new__(class, *arguments): how protocol 2
  // pickles a plain class instance (a dataclass), with BUILD setting its fields.
  PickleWriter& new_object();
  // object, state -> the object with `state` set (__setstate__ or __dict__.update).
  PickleWriter& build();
  // value -> the object persistent_load returns for it (torch.save's storages).
  PickleWriter& persistent_id();

  // STOP; the finished bytes.
  std::string finish();

 private:
  void op(uint8_t opcode) { out_.push_back(static_cast<char>(opcode)); }
  void little_endian(uint64_t value, int bytes);
  std::string out_;
  bool finished_ = false;
};

}  // namespace titan::checkpoint
