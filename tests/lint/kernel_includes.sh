#!/usr/bin/env bash
# Kernel files are compiled once per kernel set, the AVX2 and AVX-512 copies
# enabling their ISA with a pragma at the end of vec.h. Anything included after
# vec.h would be compiled for that ISA too and could leak AVX2/AVX-512 code into
# shared symbols, so vec.h must be each kernel file's last include.
set -euo pipefail
status=0
for file in "$1"/src/titan/ops/cpu/kernels/*.cpp; do
  last=$(grep -E '^#include' "$file" | tail -n 1)
  if [[ "$last" != '#include "titan/ops/cpu/kernels/vec.h"' ]]; then
    echo "$file: last include is '$last', must be \"titan/ops/cpu/kernels/vec.h\""
    status=1
  fi
done
[[ $status -eq 0 ]] && echo "kernel include order: ok"
exit $status
