// The CPU kernel files compiled once per ISA. Each defines
// `void register_<name>()` in namespace titan::ops::cpu::<isa>; register.cpp
// calls the chosen ISA's set. Add a file here when adding one to kernels/.
#pragma once

#define TITAN_CPU_KERNEL_FILES(X) \
  X(copy)                         \
  X(random)                       \
  X(elementwise)                  \
  X(reduction)                    \
  X(softmax)                      \
  X(embedding)                    \
  X(rms_norm)                     \
  X(rope)                         \
  X(attention)                    \
  X(attention_mask)               \
  X(attention_merge)              \
  X(cross_entropy)                \
  X(adamw)                        \
  X(moe_routing)
