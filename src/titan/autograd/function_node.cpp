#include "titan/autograd/function_node.h"

namespace titan::autograd {

bool record(const char* name, std::initializer_list<const Tensor*> inputs, std::initializer_list<Tensor*> outputs,
            BackwardFunction body) {
  auto node = make_node<FunctionNode>(inputs, name, static_cast<uint32_t>(outputs.size()));
  if (!node) return false;
  node->set_body(std::move(body));
  uint32_t index = 0;
  for (Tensor* output : outputs) set_history(*output, node, index++);
  return true;
}

}  // namespace titan::autograd
