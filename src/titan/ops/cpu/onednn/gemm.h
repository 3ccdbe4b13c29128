// What the rest of titan may need to know about the CPU GEMM: whether bf16
// operands are widened to f32 on this CPU (oneDNN has no bf16 matmul below
// AVX-512), and the f32 scratch that widening takes.
#pragma once

#include <cstdint>

namespace titan::ops::cpu {

// True where oneDNN cannot multiply bf16 (decided once, at the first call).
bool gemm_widens_bf16();

// Widening's f32 scratch beyond the smaller operand (which is widened whole):
// one panel of the larger operand of at most this many elements (4 MiB), or 64
// of its rows/columns when a single one is longer than 1/64 of that.
constexpr int64_t kGemmWidenPanelElements = int64_t{1} << 20;

}  // namespace titan::ops::cpu
