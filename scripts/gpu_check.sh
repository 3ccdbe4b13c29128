#!/usr/bin/env bash
# The GPU checks, for a machine with an NVIDIA GPU (target: under 8 minutes on
# one H200): configure and build for this GPU only, run every CUDA test (the
# op tests' CUDA cases, suites Cuda* in titan_ops_tests: each CUDA kernel
# against the CPU backend on the same inputs; and titan_cuda_tests: device,
# memory recorder, profiler timer, recorded MoE routing, training steps, the
# FLUX autoencoder, PyTorch's CUDA ops), run `titan bench gpu` (GEMM,
# attention, llama3 1B training beside PyTorch), and print a summary. Results
# land in $OUT (or ./gpu_check_out).
#
# A machine without the Debian build dependencies (the lent H200 image) runs
# the binaries packed here by scripts/gpu_bundle.sh: carry gpu_bundle/ along
# and this script uses it instead of building.
#
#   scripts/gpu_check.sh                 # everything
#   GPU_CHECK_BENCH=0 scripts/gpu_check.sh   # tests only
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out=${OUT:-$root/gpu_check_out}
build=${GPU_CHECK_BUILD:-build-gpu}
mkdir -p "$out"
log() { printf '\n== %s (%ds)\n' "$1" "$SECONDS"; }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$out/gpu.txt" || {
  echo "gpu_check: nvidia-smi failed: no NVIDIA GPU here"
  exit 1
}
capability=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d '.')
arch=$capability
[ "$capability" = 90 ] && arch=90a  # Hopper-only instructions need the 'a' target

if [ -x gpu_bundle/bin/titan ]; then
  # Built elsewhere by scripts/gpu_bundle.sh (this machine lacks the build dependencies).
  log "using gpu_bundle/ (prebuilt for sm_90a)"
  export LD_LIBRARY_PATH="$root/gpu_bundle/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
  titan=gpu_bundle/bin/titan
  tests=gpu_bundle/bin/titan_cuda_tests
  op_tests=gpu_bundle/bin/titan_ops_tests
else
  log "configure (sm_$arch)"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTITAN_CUDA_ARCHITECTURES="$arch" \
    -DCMAKE_CUDA_COMPILER="${CUDACXX:-/usr/local/cuda/bin/nvcc}" >"$out/configure.log" 2>&1 || {
    tail -30 "$out/configure.log"
    echo "gpu_check: configure failed (missing build dependencies? build gpu_bundle/ elsewhere with scripts/gpu_bundle.sh)"
    exit 1
  }
  # titan_ops_tests depends on the PyTorch reference cases of its CPU cases
  # (tests/CMakeLists.txt), so this build runs PyTorch on the CPU for about a
  # minute; the CUDA cases run here read none of them.
  log "build"
  ninja -C "$build" titan_cli titan_cuda_tests titan_ops_tests titan_share_data >"$out/build.log" 2>&1 || {
    grep -E "error|FAILED" -A3 "$out/build.log" | head -60
    exit 1
  }
  titan=$build/bin/titan
  tests=$build/bin/titan_cuda_tests
  op_tests=$build/bin/titan_ops_tests
fi
# The bench finds its PyTorch peer in share/titan beside the binary.

# PyTorch's own kernels on this GPU, for tests/cuda/torch_cuda_test.cpp (which
# skips the cases missing here, saying so). Written outside $out: only a few
# files come back from there, and these are some 40.
log "PyTorch cases"
torch_cases=$(mktemp -d "${TMPDIR:-/tmp}/titan_torch_cases.XXXXXX")
if timeout 300 "${GPU_CHECK_PYTHON:-python3}" tests/reference/make_torch_cuda_cases.py "$torch_cases" \
  >"$torch_cases/log" 2>&1; then
  tail -1 "$torch_cases/log"
else
  tail -25 "$torch_cases/log"
  echo "gpu_check: make_torch_cuda_cases.py failed (above): the PyTorch comparisons it did not write are skipped"
fi
export TITAN_TORCH_CUDA_CASES="$torch_cases"

# The op tests' CUDA cases are the suites named Cuda* (the filter CTest's
# ops.cuda.* entries use); their CPU cases need the reference cases and run
# per kernel set elsewhere.
log "CUDA op tests"
"$op_tests" --gtest_brief=1 --gtest_filter='Cuda*:*/Cuda*' --gtest_output="xml:$out/cuda_op_tests.xml" 2>&1 |
  tee "$out/cuda_op_tests.log" | tail -60
op_tests_status=${PIPESTATUS[0]}
log "other CUDA tests"
"$tests" --gtest_brief=1 --gtest_output="xml:$out/cuda_tests.xml" 2>&1 | tee "$out/cuda_tests.log" | tail -60
tests_status=${PIPESTATUS[0]}

bench_status=0
if [ "${GPU_CHECK_BENCH:-1}" = 1 ]; then
  log "benchmark"
  "$titan" bench gpu --json "$out/bench_gpu.json" ${GPU_CHECK_BENCH_ARGS:-} 2>&1 | tee "$out/bench_gpu.log"
  bench_status=${PIPESTATUS[0]}
fi

log "summary"
grep -E "^\[==========\]|PASSED|FAILED" "$out/cuda_op_tests.log" | tail -5
grep -E "^\[==========\]|PASSED|FAILED" "$out/cuda_tests.log" | tail -5
[ -f "$out/bench_gpu.json" ] && cat "$out/bench_gpu.json"
echo "op tests exit $op_tests_status, tests exit $tests_status, bench exit $bench_status, ${SECONDS}s"
[ "$op_tests_status" = 0 ] && [ "$tests_status" = 0 ] && [ "$bench_status" = 0 ]
