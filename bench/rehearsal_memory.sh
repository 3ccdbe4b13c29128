#!/usr/bin/env bash
# One rank of the jobs the field trains, rehearsed in this one process
# (comm.mode = fake_backend: real shards and compute, collectives that cost
# nothing), against titan's memory estimate for that rank (issue 29): each
# layout runs 2 steps at seq 64, batch 1 (8 micro-batches of 1 under
# pipeline parallelism), bf16 compute and AdamW state, and its measured peak
# in tensors must be under 20 GiB and within 10% of the estimate.
#
#   bench/rehearsal_memory.sh [LAYOUT ...]   (after `make run`, which prepares data/fortunes)
#
# Layouts (default: all, about 40 minutes on 2 cores and up to 20 GiB):
#   405b_fsdp128_tp8    Llama 3 405B, rank 0 of 1,024: FSDP 128 x TP 8
#   405b_pp16_rank0     Llama 3 405B, rank 0 of 1,024: FSDP 8 x TP 8 x PP 16, resharding after
#                       forward (stage 0: embeddings, 7 layers)
#   405b_pp16_last      the same job's rank 960 (the last stage: 7 layers, norm, output and the loss)
#   qwen3_235b_ep128    Qwen3-235B-A22B, rank 0 of 256: FSDP 256 with EP 128 (one expert per rank)
#   70b_fsdp8_tp8       Llama 3 70B, rank 0 of 64: FSDP 8 x TP 8
set -euo pipefail
cd "$(dirname "$0")/.."
titan=$PWD/build/bin/titan
work=$(mktemp -d /tmp/rehearsal_memory.XXXXXX)
trap 'rm -rf "$work"' EXIT
[ -f data/fortunes/manifest.json ] || "$titan" data prepare --train-tokenizer 2048 --output data/fortunes >/dev/null

llama="--config configs/llama3_debug.toml --model.vocab_size 128256"
qwen="--config configs/qwen3_moe_debug.toml --model.flavor 235B-A22B --model.vocab_size 151936"
pp16="--model.flavor 405B --comm.fake_world_size 1024 --parallelism.data_parallel_shard_degree 8
  --parallelism.tensor_parallel_degree 8 --parallelism.pipeline_parallel_degree 16
  --parallelism.pipeline_parallel_schedule 1F1B --parallelism.pipeline_parallel_microbatch_size 1
  --parallelism.fsdp_reshard_after_forward always --training.local_batch_size 8"
declare -A layouts=(
  [405b_fsdp128_tp8]="$llama --model.flavor 405B --comm.fake_world_size 1024
    --parallelism.data_parallel_shard_degree 128 --parallelism.tensor_parallel_degree 8"
  [405b_pp16_rank0]="$llama $pp16 --comm.fake_rank 0"
  [405b_pp16_last]="$llama $pp16 --comm.fake_rank 960"
  [qwen3_235b_ep128]="$qwen --comm.fake_world_size 256 --parallelism.data_parallel_shard_degree 256
    --parallelism.expert_parallel_degree 128"
  [70b_fsdp8_tp8]="$llama --model.flavor 70B --comm.fake_world_size 64
    --parallelism.data_parallel_shard_degree 8 --parallelism.tensor_parallel_degree 8"
)
order=(405b_fsdp128_tp8 405b_pp16_rank0 405b_pp16_last qwen3_235b_ep128 70b_fsdp8_tp8)
[ $# -gt 0 ] && order=("$@")

ok=0
printf '%-18s %10s %10s %10s %8s %10s %12s\n' layout tensors resident estimate off step_s startup_s
for name in "${order[@]}"; do
  [ -n "${layouts[$name]:-}" ] || { echo "unknown layout '$name' (see the header)"; exit 2; }
  # shellcheck disable=SC2086  # the layout is a list of flags
  # The layout's flags come last: they override these (the pipeline's 8 micro-batches).
  if ! "$titan" train --training.seq_len 64 --training.local_batch_size 1 --training.steps 2 \
    --optimizer.state_dtype bf16 --validation.enable false --comm.mode fake_backend \
    --job.dump_folder "$work/$name" ${layouts[$name]} >"$work/$name.log" 2>&1; then
    tail -5 "$work/$name.log"
    ok=1
    continue
  fi
  python3 - "$name" "$work/$name.log" <<'EOF' || ok=1
import re, sys
name, text = sys.argv[1], open(sys.argv[2]).read()
peak = re.search(r"peak memory ([0-9.]+) GiB in tensors, ([0-9.]+) GiB resident.*estimated ([0-9.]+) GiB", text)
step = re.search(r"median ([0-9.]+) s each", text)
startup = re.search(r"start-up ([0-9.]+) s", text)
tensors, resident, estimate = (float(g) for g in peak.groups())
off = tensors / estimate - 1
good = abs(off) <= 0.10 and tensors < 20
print(f"{name:<18} {tensors:10.3f} {resident:10.3f} {estimate:10.3f} {off:+8.1%} {float(step.group(1)):10.1f} "
      f"{float(startup.group(1)):12.1f}{'' if good else '  <- outside'}")
sys.exit(0 if good else 1)
EOF
done
exit $ok
