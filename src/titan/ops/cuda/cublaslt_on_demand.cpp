// cuBLASLt, loaded the first time a GEMM needs it rather than when a program
// starts. Linking libcublasLt (over 500 MB) made every titan process, `titan
// --version` and each test included, spend about half a second in its static
// initialisers, on machines with no GPU as much as on one. This file defines
// the cuBLASLt functions titan calls, with their declared signatures, so the
// call sites stay plain cuBLASLt; each forwards to the library's own function,
// found with dlopen/dlsym on first use. A missing library is an error naming
// it, raised at the first GEMM on a CUDA device.
#include <cublasLt.h>
#include <dlfcn.h>

#include "titan/core/error.h"

namespace {

void* cublaslt_library() {
  static void* const handle = [] {
    void* h = dlopen(TITAN_CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      titan::fail("cannot load cuBLASLt ({}): {}; put the CUDA toolkit's library folder on LD_LIBRARY_PATH",
                  TITAN_CUBLASLT_SONAME, dlerror());
    }
    return h;
  }();
  return handle;
}

// The library's own definition of `name`, typed as the declaration titan's
// own definition below has (the same function type).
template <typename Function>
Function* real(const char* name) {
  void* symbol = dlsym(cublaslt_library(), name);
  if (symbol == nullptr) titan::fail("{} has no function {}", TITAN_CUBLASLT_SONAME, name);
  return reinterpret_cast<Function*>(symbol);
}

}  // namespace

// Each resolves its target once (a function-local static: thread-safe).
#define TITAN_CUBLASLT_TARGET(name)                                      \
  static decltype(&::name) const target = real<decltype(::name)>(#name); \
  return target

extern "C" {

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) { TITAN_CUBLASLT_TARGET(cublasLtCreate)(handle); }

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) { TITAN_CUBLASLT_TARGET(cublasLtDestroy)(handle); }

const char* cublasLtGetStatusName(cublasStatus_t status) { TITAN_CUBLASLT_TARGET(cublasLtGetStatusName)(status); }

const char* cublasLtGetStatusString(cublasStatus_t status) { TITAN_CUBLASLT_TARGET(cublasLtGetStatusString)(status); }

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* a,
                              cublasLtMatrixLayout_t a_desc, const void* b, cublasLtMatrixLayout_t b_desc,
                              const void* beta, const void* c, cublasLtMatrixLayout_t c_desc, void* d,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspace_bytes, cudaStream_t stream) {
  TITAN_CUBLASLT_TARGET(cublasLtMatmul)
  (handle, desc, alpha, a, a_desc, b, b_desc, beta, c, c_desc, d, d_desc, algo, workspace, workspace_bytes, stream);
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t a_desc, cublasLtMatrixLayout_t b_desc,
                                              cublasLtMatrixLayout_t c_desc, cublasLtMatrixLayout_t d_desc,
                                              cublasLtMatmulPreference_t preference, int requested,
                                              cublasLtMatmulHeuristicResult_t results[], int* returned) {
  TITAN_CUBLASLT_TARGET(cublasLtMatmulAlgoGetHeuristic)
  (handle, desc, a_desc, b_desc, c_desc, d_desc, preference, requested, results, returned);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t compute, cudaDataType_t scale) {
  TITAN_CUBLASLT_TARGET(cublasLtMatmulDescCreate)(desc, compute, scale);
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                                              const void* value, size_t bytes) {
  TITAN_CUBLASLT_TARGET(cublasLtMatmulDescSetAttribute)(desc, attribute, value, bytes);
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  TITAN_CUBLASLT_TARGET(cublasLtMatmulDescDestroy)(desc);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* preference) {
  TITAN_CUBLASLT_TARGET(cublasLtMatmulPreferenceCreate)(preference);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                    cublasLtMatmulPreferenceAttributes_t attribute, const void* value,
                                                    size_t bytes) {
  TITAN_CUBLASLT_TARGET(cublasLtMatmulPreferenceSetAttribute)(preference, attribute, value, bytes);
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
  TITAN_CUBLASLT_TARGET(cublasLtMatmulPreferenceDestroy)(preference);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  TITAN_CUBLASLT_TARGET(cublasLtMatrixLayoutCreate)(layout, type, rows, cols, ld);
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attribute, const void* value,
                                                size_t bytes) {
  TITAN_CUBLASLT_TARGET(cublasLtMatrixLayoutSetAttribute)(layout, attribute, value, bytes);
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  TITAN_CUBLASLT_TARGET(cublasLtMatrixLayoutDestroy)(layout);
}

}  // extern "C"
