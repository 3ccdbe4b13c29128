// The CPU kernel files, in two lists that register.cpp walks the same way:
// each file defines `void register_<name>()`, which puts its kernels in the op
// tables. A kernel file missing here compiles and links, and its op then fails
// with "op '...' has no kernel for device cpu".
#pragma once

// ops/cpu/kernels/<name>.cpp: plain loops the compiler vectorises, so each is
// compiled once per ISA set (src/titan/CMakeLists.txt), its register_<name>()
// in namespace titan::ops::cpu::<isa>; register.cpp calls the chosen set's.
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
  X(attention_sinks)              \
  X(cross_entropy)                \
  X(adamw)                        \
  X(moe_routing)                  \
  X(delta_rule)                   \
  X(causal_conv1d)                \
  X(gdn_gates)                    \
  X(conv2d)                       \
  X(group_norm)                   \
  X(float8)

// ops/cpu/onednn/<name>.cpp: kernels that are oneDNN calls. oneDNN picks its
// own ISA at run time (capped by TITAN_CPU_ISA, see register.cpp), so a copy
// per set would only repeat the same calls: compiled once, register_<name>()
// in namespace titan::ops::cpu.
#define TITAN_CPU_ONEDNN_KERNEL_FILES(X) \
  X(gemm)                                \
  X(grouped_gemm)
