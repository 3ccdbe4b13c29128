// Turns a failed cuBLAS(Lt) call into a titan::Error naming the call and the
// status, as TITAN_CUDA_CHECK does for the runtime.
#pragma once

#include <cublasLt.h>

#include "titan/core/error.h"

#define TITAN_CUBLAS_CHECK(call)                                                                                 \
  do {                                                                                                           \
    const cublasStatus_t titan_cublas_status = (call);                                                           \
    if (titan_cublas_status != CUBLAS_STATUS_SUCCESS) {                                                          \
      ::titan::fail("cuBLAS call {} failed: {} ({}) ({}:{})", #call, cublasLtGetStatusName(titan_cublas_status), \
                    cublasLtGetStatusString(titan_cublas_status), __FILE__, __LINE__);                           \
    }                                                                                                            \
  } while (0)
