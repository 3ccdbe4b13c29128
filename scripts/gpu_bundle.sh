#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh runs, for a GPU machine without this
# project's Debian build dependencies (the lent H200 image has the CUDA
# toolkit, CMake and PyTorch, but not oneDNN, Open MPI, GoogleTest, fmt...):
# the titan executable and the CUDA test binaries (titan_ops_tests, whose
# CUDA cases gpu_check.sh runs, and titan_cuda_tests), built here for Hopper
# (sm_90a) and stripped, titan's share/titan data beside them, plus the shared
# libraries they load that are neither CUDA's nor the C library's.
# Output: gpu_bundle/{bin,share,lib} (git-ignored), about 100 MB;
# carry it to the machine, where gpu_check.sh uses it instead of building.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
build=build-gpu-bundle
arch=${GPU_BUNDLE_ARCH:-90a}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTITAN_CUDA_ARCHITECTURES="$arch" >/dev/null
ninja -C "$build" titan_cli titan_cuda_tests titan_ops_tests titan_share_data
rm -rf gpu_bundle
mkdir -p gpu_bundle/lib gpu_bundle/bin gpu_bundle/share
cp "$build/bin/titan" "$build/bin/titan_cuda_tests" "$build/bin/titan_ops_tests" gpu_bundle/bin/
cp -r "$build/share/titan" gpu_bundle/share/
strip gpu_bundle/bin/titan gpu_bundle/bin/titan_cuda_tests gpu_bundle/bin/titan_ops_tests
# CUDA's libraries come from the machine's own toolkit and driver; glibc and
# the loader from its system (newer than Debian 12's, so these binaries run).
ldd gpu_bundle/bin/titan gpu_bundle/bin/titan_cuda_tests gpu_bundle/bin/titan_ops_tests | awk '/=> \// {print $3}' | sort -u |
  grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so|/usr/local/cuda|libcuda\.so' |
  while read -r lib; do cp -L "$lib" gpu_bundle/lib/; done
strip --strip-unneeded gpu_bundle/lib/*.so* 2>/dev/null || true
du -sh gpu_bundle
