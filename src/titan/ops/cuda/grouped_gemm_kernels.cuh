// Launcher for the CUDA grouped GEMM of a mixture-of-experts layer (see
// ops/grouped_gemm.h). Plain pointers and sizes only; the Tensor plumbing is
// in grouped_gemm.cpp. The expert row counts stay on the device: the kernels
// read them there, so a step through this op can be recorded into a graph.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace titan::ops::cuda {

// N rows in expert order, E experts, weights [E, out, in]:
//  forward:     out [N, out] = a [N, in] @ b[e]^T     (a = x, b = w)
//  input_grad:  out [N, in]  = a [N, out] @ b[e]      (a = grad_y, b = w)
//  weight_grad: out [E, out, in], out[e] = a_e^T @ b_e (a = grad_y [N, out], b = x [N, in]),
//               zero for an expert with no rows
enum class GroupedProduct { forward, input_grad, weight_grad };

// Device workspace launch_grouped_gemm needs, in int64 words.
inline int64_t grouped_gemm_workspace_words(int64_t experts) { return 2 * (experts + 1); }

// Largest grid dimension the launcher uses for column tiles and experts
// (grid.y and grid.z); the caller checks sizes against it.
inline constexpr int64_t kGroupedGemmMaxGridYZ = 65535;
// Rows and columns of one output tile.
inline constexpr int64_t kGroupedGemmTile = 64;

// Operands f32 or bf16 (both the same), f32 accumulation, one rounding on
// store. counts [E] i64 on the device; a count below 0 counts as 0, and counts
// adding up to more than N are cut at N (rows past N never exist); rows past
// the counts' sum are left unwritten (the CPU kernel refuses such counts).
cudaError_t launch_grouped_gemm(GroupedProduct kind, bool bf16, void* out, const void* a, const void* b,
                                const int64_t* counts, int64_t experts, int64_t rows, int64_t out_features,
                                int64_t in_features, int64_t* workspace, cudaStream_t stream);

}  // namespace titan::ops::cuda
