#!/usr/bin/env bash
# Activation checkpointing's price and saving, side by side on one machine:
# the same job (llama3 debugmodel by default, seq 512 x batch 8, bf16) with
# activation_checkpoint none, full, selective (every 2nd block) and selective
# with TorchTitan's per-op policy (selective_ops: every block, keeping
# attention's and every other matmul's outputs). Prints each mode's median
# tokens/s over steps 2..N and its peak of live tensor memory. Not part of
# `make test`; about 1 minute per mode at the default size.
#
#   bench/activation_checkpoint.sh [STEPS] [TRAIN OPTIONS...]   (after `make run`, which prepares data/fortunes)
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-6}
shift $(( $# < 1 ? $# : 1 ))
titan=$PWD/build/bin/titan
work=$(mktemp -d /tmp/ac_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
[ -f data/fortunes/manifest.json ] || "$titan" data prepare --train-tokenizer 2048 --output data/fortunes >/dev/null
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
for mode in none full selective selective_ops; do
  ac="--activation_checkpoint.mode ${mode%_ops}"
  [ "$mode" = selective_ops ] && ac="$ac --activation_checkpoint.selective_ops true"
  "$titan" train --config configs/llama3_debug.toml --training.steps "$steps" --validation.enable false \
    --checkpoint.enable false --job.dump_folder "$work/$mode" $ac "$@" >"$work/$mode.log" 2>&1 ||
    { cat "$work/$mode.log"; exit 1; }
  python3 - "$mode" "$work/$mode.log" <<'PY'
import re, statistics, sys
mode, log = sys.argv[1], open(sys.argv[2]).read()
steps = re.findall(r"^step +\d+/\d+ .*?mem [0-9.]+/([0-9.]+)GiB.*?tps +(\d+)", log, re.M)
tps = [int(t) for _, t in steps[1:]]
peak = max(float(p) for p, _ in steps)
print(f"{mode:14s} median {statistics.median(tps):7.0f} tokens/s over steps 2..{len(steps)}, peak tensors {peak:.3f} GiB")
PY
done
