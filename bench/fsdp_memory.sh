#!/usr/bin/env bash
# A real FSDP job's per-rank memory against titan's estimate (issue 29's
# memory check): llama3 1B under FSDP 4 on this machine's 4 ranks, bf16
# AdamW state, seq 256, batch 1, 3 steps and the streamed export at the end.
# Every rank's peak resident memory (VmHWM, from /usr/bin/time) must be within
# 15% of the memory check's estimate and below one full f32 copy of the model
# plus 1 GiB. About 2 minutes and 18 GB of host memory; not part of `make test`.
#
#   bench/fsdp_memory.sh [FLAVOR] [RANKS] [TRAIN OPTIONS...]   (after `make run`, which prepares data/fortunes)
#
# e.g. `bench/fsdp_memory.sh 1B 4 --checkpoint.last_save_model_only false`:
# the same with the full training state saved at the end instead of the export.
set -euo pipefail
cd "$(dirname "$0")/.."
flavor=${1:-1B}
ranks=${2:-4}
shift $(( $# < 2 ? $# : 2 ))
extra="$*"
titan=$PWD/build/bin/titan
work=$(mktemp -d /tmp/fsdp_memory.XXXXXX)
trap 'rm -rf "$work"' EXIT
[ -f data/fortunes/manifest.json ] || "$titan" data prepare --train-tokenizer 2048 --output data/fortunes >/dev/null

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpirun --oversubscribe -np "$ranks" sh -c "/usr/bin/time -f %M -o $work/rss.\$OMPI_COMM_WORLD_RANK \
  $titan train --config configs/llama3_debug.toml --model.flavor $flavor \
  --training.seq_len 256 --training.local_batch_size 1 --training.steps 3 --optimizer.state_dtype bf16 \
  --validation.enable false --parallelism.data_parallel_shard_degree $ranks --job.dump_folder $work/dump $extra" \
  >"$work/log" 2>&1 || { cat "$work/log"; exit 1; }

estimate=$(sed -n 's/.*this job needs about \([0-9.]*\) GiB per rank.*/\1/p' "$work/log")
parameters=$(sed -n 's/.*titan: llama3 [^,]*, \([0-9]*\) parameters.*/\1/p' "$work/log")
tensors=$(grep -o 'mem [0-9.]*/' "$work/log" | tail -1 | tr -dc '0-9.')
grep -E '^step ' "$work/log"
python3 - "$estimate" "$parameters" "$tensors" "$work" "$ranks" <<'EOF'
import sys
estimate, parameters, tensors, work, ranks = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), sys.argv[4], int(sys.argv[5])
limit = parameters * 4 / 2**30 + 1.0
print(f"estimate {estimate:.3f} GiB per rank; rank 0's tensor peak {tensors:.3f} GiB; "
      f"one f32 copy of the model + 1 GiB = {limit:.3f} GiB")
ok = True
for rank in range(ranks):
    rss = int(open(f"{work}/rss.{rank}").read().split()[-1]) / 2**20
    off = rss / estimate - 1
    good = abs(off) <= 0.15 and rss < limit
    ok = ok and good
    print(f"rank {rank}: peak resident {rss:.3f} GiB ({off:+.1%} of the estimate){'' if good else '  <- outside'}")
sys.exit(0 if ok else 1)
EOF
