#!/usr/bin/env bash
# Reading PyTorch's own files, against PyTorch: llama3 FLAVOR (default 1B,
# bf16, random weights) as a Hugging Face folder of safetensors, of
# pytorch_model.bin (torch.save, written by this machine's PyTorch) and as
# Meta's release (params.json + 2 consolidated.NN.pth model-parallel shards).
# Times `titan convert --from hf|pth|meta ... --to titan` (titan's restricted
# unpickler, ranged reads, one tensor at a time) beside the PyTorch peer doing
# the same job: torch.load the files (weights_only is not in PyTorch 1.13:
# a full unpickler), join Meta's shards, write one safetensors file.
# Medians of RUNS (default 3); prints the CPU. About 8 GB in /tmp; not part of `make test`.
#
#   bench/torch_files.sh [FLAVOR] [RUNS]   (after `make run`, which prepares data/fortunes)
set -euo pipefail
cd "$(dirname "$0")/.."
flavor=${1:-1B}
runs=${2:-3}
titan=$PWD/build/bin/titan
work=$(mktemp -d /tmp/torch_files.XXXXXX)
trap 'rm -rf "$work"' EXIT
[ -f data/fortunes/manifest.json ] || "$titan" data prepare --train-tokenizer 2048 --output data/fortunes >/dev/null
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), $(nproc) cores, $(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ')"
"$titan" train --config configs/llama3_debug.toml --model.flavor "$flavor" --checkpoint.create_seed_checkpoint true \
  --training.memory_check false \
  --job.dump_folder "$work/seed" >"$work/seed.log" 2>&1 || { cat "$work/seed.log"; exit 1; }
"$titan" convert --from titan "$work/seed/checkpoint/step-000000" --to hf "$work/hf" --dtype bf16 >/dev/null
/usr/bin/python3 tests/reference/torch_files.py bin "$work/hf" "$work/bin" 1
/usr/bin/python3 tests/reference/torch_files.py meta "$work/hf" "$work/meta" 2
du -sh "$work/hf" "$work/bin" "$work/meta" | sed 's|/tmp/torch_files[^/]*/||'
/usr/bin/python3 - "$work" "$runs" "$titan" <<'PY'
import os, shutil, statistics, subprocess, sys, time
work, runs, titan = sys.argv[1], int(sys.argv[2]), sys.argv[3]
peer = r'''
import sys, torch, glob
sys.path.insert(0, "tests/reference")
import safetensors_io
src, out, kind = sys.argv[1:4]
if kind == "pth":
    tensors = torch.load(src + "/pytorch_model.bin", map_location="cpu")
else:
    shards = [torch.load(f, map_location="cpu") for f in sorted(glob.glob(src + "/consolidated.*.pth"))]
    tensors = {}
    for name in shards[0]:
        if name.endswith("norm.weight"):
            tensors[name] = shards[0][name]
        else:
            dim = 1 if name.endswith(("attention.wo.weight", "feed_forward.w2.weight")) else 0
            tensors[name] = torch.cat([s[name] for s in shards], dim=dim)
safetensors_io.save(out, tensors)
'''
def timed(cmd):
    start = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start
for kind, src in (("hf", "hf"), ("pth", "bin"), ("meta", "meta")):
    titan_times, peer_times = [], []
    for _ in range(runs):
        out = f"{work}/out_{kind}"
        shutil.rmtree(out, ignore_errors=True)
        titan_times.append(timed([titan, "convert", "--from", kind, f"{work}/{src}", "--to", "titan", out]))
        if kind != "hf":
            peer_times.append(timed(["/usr/bin/python3", "-c", peer, f"{work}/{src}", f"{work}/peer.safetensors", kind]))
            os.remove(f"{work}/peer.safetensors")
    line = f"--from {kind:4s}: titan convert {statistics.median(titan_times):6.2f} s"
    if peer_times:
        line += f", PyTorch torch.load + write {statistics.median(peer_times):6.2f} s"
    print(line + f" (median of {runs})")
PY
