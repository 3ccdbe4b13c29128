#!/usr/bin/env bash
# Float8 convergence on this machine: the same job trained in bf16 and with
# each float8 recipe (tensorwise, rowwise, MXFP8), from the same seed and
# data, its loss curves overlaid by `titan plot` and the final losses' gaps
# printed. llama3 debugmodel by default (configs/llama3_debug.toml; any
# config with --config, e.g. configs/qwen3_moe_debug.toml). Not part of
# `make test`: about 3 minutes per run at 300 steps on 2 cores.
#
#   bench/float8_convergence.sh OUT_DIR [STEPS] [TRAIN OPTIONS...]   (after `make run`, which prepares data/fortunes)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/float8_convergence.sh OUT_DIR [STEPS] [TRAIN OPTIONS...]}
steps=${2:-300}
shift $(( $# < 2 ? $# : 2 ))
titan=$PWD/build/bin/titan
mkdir -p "$out"
[ -f data/fortunes/manifest.json ] || "$titan" data prepare --train-tokenizer 2048 --output data/fortunes >/dev/null
config=configs/llama3_debug.toml
for arg in "$@"; do [[ "$arg" == *.toml ]] && config=$arg; done
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
# An MoE config also converts its experts' grouped GEMMs: float8 rowwise
# beside the float8 Linear recipes, MXFP8 beside MXFP8.
grouped_float8="" grouped_mx=""
if grep -q 'moe' <<<"$config"; then
  grouped_float8=",quantize.grouped_mm.float8 --quantize.grouped_mm.float8.fqns experts"
  grouped_mx=",quantize.grouped_mm.mx --quantize.grouped_mm.mx.fqns experts"
fi
declare -A recipes=(
  [bf16]=""
  [tensorwise]="--model.converters quantize.linear.float8$grouped_float8 --quantize.linear.float8.recipe_name tensorwise --quantize.linear.float8.filter_fqns output"
  [rowwise]="--model.converters quantize.linear.float8$grouped_float8 --quantize.linear.float8.recipe_name rowwise --quantize.linear.float8.filter_fqns output"
  [mxfp8]="--model.converters quantize.linear.mx$grouped_mx --quantize.linear.mx.filter_fqns output"
)
for name in bf16 tensorwise rowwise mxfp8; do
  # shellcheck disable=SC2086
  "$titan" train --config "$config" --training.steps "$steps" --metrics.log_freq 10 --validation.enable false \
    --checkpoint.enable false --job.dump_folder "$out/$name" ${recipes[$name]} "$@" >"$out/$name.log" 2>&1 ||
    { tail -20 "$out/$name.log"; exit 1; }
  grep 'titan: quantize' "$out/$name.log" || true
done
"$titan" plot -o "$out/loss.svg" "$out/bf16" "$out/tensorwise" "$out/rowwise" "$out/mxfp8"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
def losses(name):
    rows = [json.loads(line) for line in open(f"{out}/{name}/metrics.jsonl")]
    return [r["loss"] for r in rows if "loss" in r and "step" in r]
base = losses("bf16")
def tail_mean(values):  # the last 50 logged steps' mean: one step's loss is noisy
    return sum(values[-5:]) / len(values[-5:])
print(f"{'run':12s} {'final loss':>10s} {'last 50 steps':>14s} {'gap to bf16':>12s}")
for name in ["bf16", "tensorwise", "rowwise", "mxfp8"]:
    values = losses(name)
    gap = tail_mean(values) - tail_mean(base)
    print(f"{name:12s} {values[-1]:10.4f} {tail_mean(values):14.4f} {gap:+12.4f} ({100 * gap / tail_mean(base):+.2f}%)")
PY
echo "curves: $out/loss.svg"
