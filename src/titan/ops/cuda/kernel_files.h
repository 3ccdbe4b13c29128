// The CUDA kernel files: each defines register_<name>(), which puts its
// kernels in the op tables (called by register.cpp when a GPU is present). An
// op is ops/cuda/<name>.cu (kernels, launchers, the Tensor side; attention
// spreads over attention*.cu). gemm, synchronize, host_swap, step_recorder and
// profiler_timer are ops/cuda/<name>.cpp: host code with no kernel of its own.
#pragma once

#define TITAN_CUDA_KERNEL_FILES(X) \
  X(copy)                          \
  X(elementwise)                   \
  X(softmax)                       \
  X(rms_norm)                      \
  X(rope)                          \
  X(random)                        \
  X(attention_mask)                \
  X(reduction)                     \
  X(embedding)                     \
  X(moe_routing)                   \
  X(grouped_gemm)                  \
  X(adamw)                         \
  X(cross_entropy)                 \
  X(gemm)                          \
  X(fused_cross_entropy)           \
  X(attention)                     \
  X(attention_merge)               \
  X(delta_rule)                    \
  X(causal_conv1d)                 \
  X(gdn_gates)                     \
  X(attention_sinks)               \
  X(conv2d_im2col)                 \
  X(group_norm)                    \
  X(float8)                        \
  X(float8_gemm)                   \
  X(synchronize)                   \
  X(host_swap)                     \
  X(step_recorder)                 \
  X(profiler_timer)
