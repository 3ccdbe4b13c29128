#!/usr/bin/env bash
# clang-tidy over src/ with .clang-tidy's checks, warnings as errors.
# A compile database is configured (not built) in BUILD_DIR with the unity
# build on, so each batch of a library's files is one translation unit and
# its headers are parsed once; the CPU kernel files, compiled once per ISA
# set, are checked once (the baseline set's entry).
#   tests/lint/clang_tidy.sh BUILD_DIR [JOBS]
set -euo pipefail
build=$1
jobs=${2:-$(nproc)}
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$build"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DTITAN_CUDA=OFF -DTITAN_TESTS=OFF \
  -DTITAN_UNITY_BUILD=ON -DCMAKE_EXPORT_COMPILE_COMMANDS=ON > "$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; exit 1; }
# The entries to check: unity batches, and every other source of src/ once.
files=$(/usr/bin/python3 - "$build/compile_commands.json" "$root/src" <<'PY'
import json, sys
entries = json.load(open(sys.argv[1]))
seen, out = set(), []
for e in entries:
    f = e["file"]
    if "-DTITAN_ISA=avx2" in e["command"] or "-DTITAN_ISA=avx512" in e["command"]:
        continue  # the ISA kernel files: their baseline compile is checked
    if "/Unity/unity_" in f or (f.startswith(sys.argv[2]) and f not in seen):
        seen.add(f); out.append(f)
print("\n".join(out))
PY
)
count=$(echo "$files" | wc -l)
log=$build/clang-tidy.log
start=$(date +%s)
if echo "$files" | xargs -P "$jobs" -n 1 clang-tidy -p "$build" --quiet > "$log" 2>&1 &&
  ! grep -q "warning:\|error:" "$log"; then
  echo "tidy: $count translation units clean ($(( $(date +%s) - start )) s)"
else
  grep -A3 "warning:\|error:" "$log" | head -200
  echo "tidy: FAILED (full log: $log)"
  exit 1
fi
