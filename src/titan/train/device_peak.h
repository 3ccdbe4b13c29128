// The peak dense TFLOP/s MFU is measured against: a table for known GPUs,
// and on the CPU the GEMM throughput oneDNN reaches on a large square product
// on this machine (measured once, in the training dtype).
#pragma once

#include "titan/core/device.h"
#include "titan/core/dtype.h"

namespace titan::train {

double default_peak_tflops(Device device, DType compute_dtype);
double measured_cpu_gemm_tflops(DType dtype);

}  // namespace titan::train
