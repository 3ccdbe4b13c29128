#include "titan/ops/cuda/gemm_plan_cache.h"

#include <functional>
#include <map>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "titan/ops/cuda/cuda_check.h"
#include "titan/ops/cuda/gemm_cublas_check.h"

namespace titan::ops::cuda {
namespace {

// 32 MiB is what NVIDIA recommends for Hopper (split-K and stream-K kernels
// need it to pick their fastest schedule); less only narrows the choice.
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
// Training repeats a few dozen shapes; a runaway stream of new ones (a bug, or
// variable sequence lengths) must not grow the cache without bound.
constexpr size_t kMaxPlans = 4096;

struct ProblemHash {
  size_t operator()(const GemmProblem& p) const {
    size_t h = 0;
    auto mix = [&h](auto value) {
      h ^= std::hash<decltype(value)>{}(value) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
    };
    mix(p.device);
    mix(static_cast<int>(p.op_a));
    mix(static_cast<int>(p.op_b));
    mix(p.batch);
    mix(p.fp8_scales ? static_cast<int>(*p.fp8_scales) : -1);
    for (const GemmMatrix* m : {&p.a, &p.b, &p.c}) {
      mix(static_cast<int>(m->type));
      mix(m->rows);
      mix(m->cols);
      mix(m->ld);
      mix(m->batch_stride);
      mix(m->alignment);
    }
    return h;
  }
};

template <typename T>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute, T value) {
  TITAN_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof(value)));
}
template <typename T>
void set_layout(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attribute, T value) {
  TITAN_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout, attribute, &value, sizeof(value)));
}
template <typename T>
void set_preference(cublasLtMatmulPreference_t preference, cublasLtMatmulPreferenceAttributes_t attribute, T value) {
  TITAN_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &value, sizeof(value)));
}

CublasLtPtr<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> make_layout(const GemmMatrix& m, int32_t batch) {
  cublasLtMatrixLayout_t raw = nullptr;
  TITAN_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&raw, m.type, m.rows, m.cols, m.ld));
  CublasLtPtr<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> layout(raw);
  if (batch > 1) {
    // Every matrix carries the batch count (cuBLASLt rejects a mismatch); a
    // stride of 0 hands every batch entry the same matrix, the broadcast case.
    set_layout(raw, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, batch);
    set_layout(raw, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, m.batch_stride);
  }
  return layout;
}

std::shared_ptr<const GemmPlan> make_plan(cublasLtHandle_t handle, const GemmProblem& problem) {
  auto plan = std::make_shared<GemmPlan>();
  cublasLtMatmulDesc_t desc = nullptr;
  // CUBLAS_COMPUTE_32F, not _FAST_TF32: f32 operands are multiplied in full
  // f32, as on the CPU (TF32 keeps 10 mantissa bits, far outside the f32
  // tolerance the backends are held to). bf16 operands multiply exactly and
  // accumulate in f32 under the same compute type.
  TITAN_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  plan->desc.reset(desc);
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(problem.op_a));
  set_desc(desc, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(problem.op_b));
  if (problem.fp8_scales) {
    set_desc(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, static_cast<int32_t>(*problem.fp8_scales));
    set_desc(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, static_cast<int32_t>(*problem.fp8_scales));
    // Accumulate in full f32 throughout (no Hopper "fast accumulation"), as the CPU's emulation does.
    set_desc(desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(0));
  }
  // The epilogue stays CUBLASLT_EPILOGUE_DEFAULT: CUBLASLT_EPILOGUE_BIAS would
  // fuse a bias add, but the gemm op has no bias argument to give it.
  plan->a = make_layout(problem.a, problem.batch);
  plan->b = make_layout(problem.b, problem.batch);
  plan->c = make_layout(problem.c, problem.batch);

  cublasLtMatmulPreference_t raw_preference = nullptr;
  TITAN_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&raw_preference));
  CublasLtPtr<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> preference(raw_preference);
  set_preference(raw_preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(kWorkspaceBytes));
  // The heuristic assumes 256-byte aligned pointers unless told otherwise;
  // views (a token chunk of hidden states, a narrowed weight) often are not.
  set_preference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, problem.a.alignment);
  set_preference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, problem.b.alignment);
  set_preference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, problem.c.alignment);
  set_preference(raw_preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, problem.c.alignment);

  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
      handle, desc, plan->a.get(), plan->b.get(), plan->c.get(), plan->c.get(), raw_preference, 1, &result, &found);
  // NOT_SUPPORTED means no algorithm for this configuration: the caller falls
  // back (one GEMM per batch entry) or reports the problem in its own terms.
  if (status != CUBLAS_STATUS_NOT_SUPPORTED) TITAN_CUBLAS_CHECK(status);
  if (status == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) {
    plan->algo = result.algo;
    plan->has_algo = true;
  }
  return plan;
}

struct Cache {
  std::mutex mutex;
  std::map<int, cublasLtHandle_t> handles;
  std::map<std::pair<int, cudaStream_t>, void*> workspaces;
  std::unordered_map<GemmProblem, std::shared_ptr<const GemmPlan>, ProblemHash> plans;
};

// Never destroyed: handles and device memory released by static destructors
// at exit would be released after the CUDA runtime may already be gone.
Cache& cache() {
  static Cache* instance = new Cache;
  return *instance;
}

}  // namespace

GemmLaunch gemm_launch(const GemmProblem& problem, cudaStream_t stream) {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  GemmLaunch launch;

  auto handle = c.handles.find(problem.device);
  if (handle == c.handles.end()) {
    cublasLtHandle_t created = nullptr;
    TITAN_CUBLAS_CHECK(cublasLtCreate(&created));
    handle = c.handles.emplace(problem.device, created).first;
  }
  launch.handle = handle->second;

  const auto workspace_key = std::make_pair(problem.device, stream);
  auto workspace = c.workspaces.find(workspace_key);
  if (workspace == c.workspaces.end()) {
    // Not through the tensor allocator: it lives as long as the process, and
    // a caching allocator's stream-ordered frees must never see it.
    void* memory = nullptr;
    TITAN_CUDA_CHECK(cudaMalloc(&memory, kWorkspaceBytes));
    workspace = c.workspaces.emplace(workspace_key, memory).first;
  }
  launch.workspace = workspace->second;
  launch.workspace_bytes = kWorkspaceBytes;

  auto plan = c.plans.find(problem);
  if (plan == c.plans.end()) {
    if (c.plans.size() >= kMaxPlans) c.plans.clear();  // plans in use are kept alive by their shared_ptr
    plan = c.plans.emplace(problem, make_plan(launch.handle, problem)).first;
  }
  launch.plan = plan->second;
  return launch;
}

}  // namespace titan::ops::cuda
