#!/usr/bin/env bash
# Runs `titan train` on NPROC processes of this machine under Open MPI's mpirun.
#
#   scripts/run_train.sh NPROC=4 CONFIG=configs/llama3_debug.toml [--section.key value ...]
#
# Settings come first as NAME=value (or from the environment):
#   NPROC        ranks to start (default 1)
#   CONFIG       the job config (TOML), required
#   TITAN        the titan executable (default build/bin/titan in this repository)
#   MPIRUN       the launcher (default mpirun)
#   MPIRUN_ARGS  extra mpirun options, word-split (e.g. "--tag-output")
# Everything after them goes to `titan train` unchanged, e.g.
#   scripts/run_train.sh NPROC=4 CONFIG=configs/llama3_debug.toml --parallelism.data_parallel_shard_degree 4
#
# What it sets, and why:
#   --oversubscribe        ranks may outnumber cores (small machines, tests)
#   --allow-run-as-root    only when run as root (containers); Open MPI refuses root otherwise
#   --bind-to none         Open MPI pins each rank to one core when NPROC <= 2, which would
#                          squeeze a rank's OpenMP threads onto that core
#   OMPI_MCA_mpi_yield_when_idle=1
#                          a rank waiting in a collective yields its core to compute threads
#   OMP_NUM_THREADS        cores / NPROC (at least 1) unless already set, so the ranks'
#                          thread pools share the cores instead of each taking all of them
#   CUDA_VISIBLE_DEVICES   when unset and this machine has at least NPROC NVIDIA GPUs: rank i
#                          sees only GPU i (titan trains each process on its cuda:0)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

while [[ $# -gt 0 && "$1" =~ ^(NPROC|CONFIG|TITAN|MPIRUN|MPIRUN_ARGS)=(.*)$ ]]; do
  declare "${BASH_REMATCH[1]}=${BASH_REMATCH[2]}"
  shift
done
NPROC="${NPROC:-1}"
TITAN="${TITAN:-$repo/build/bin/titan}"
MPIRUN="${MPIRUN:-mpirun}"
MPIRUN_ARGS="${MPIRUN_ARGS:-}"

die() {
  echo "run_train.sh: $*" >&2
  exit 2
}
[[ "$NPROC" =~ ^[1-9][0-9]*$ ]] || die "NPROC must be a positive integer, got '$NPROC'"
[[ -n "${CONFIG:-}" ]] || die "CONFIG=path/to/job.toml is required (usage: scripts/run_train.sh NPROC=4 CONFIG=configs/x.toml [--section.key value ...])"
[[ -f "$CONFIG" ]] || die "config file '$CONFIG' not found"
[[ -x "$TITAN" ]] || die "titan executable '$TITAN' not found (build it with: make cli)"
command -v "$MPIRUN" > /dev/null || die "launcher '$MPIRUN' not found (Open MPI: apt-get install openmpi-bin)"

if [[ -z "${OMP_NUM_THREADS:-}" ]]; then
  cores="$(nproc)"
  threads=$((cores / NPROC))
  export OMP_NUM_THREADS=$((threads > 0 ? threads : 1))
fi
export OMPI_MCA_mpi_yield_when_idle=1

launcher=("$MPIRUN" --oversubscribe --bind-to none -np "$NPROC" -x OMP_NUM_THREADS -x OMPI_MCA_mpi_yield_when_idle)
if [[ "$(id -u)" -eq 0 ]]; then launcher+=(--allow-run-as-root); fi
# shellcheck disable=SC2206  # MPIRUN_ARGS is a list of options by design
launcher+=($MPIRUN_ARGS)

gpus=0
if [[ -z "${CUDA_VISIBLE_DEVICES:-}" ]] && command -v nvidia-smi > /dev/null; then
  gpus="$(nvidia-smi --list-gpus 2> /dev/null | wc -l)"
fi
if ((gpus >= NPROC && NPROC > 1)); then
  # shellcheck disable=SC2016  # expanded by each rank's shell, not this one
  exec "${launcher[@]}" bash -c 'export CUDA_VISIBLE_DEVICES=$OMPI_COMM_WORLD_LOCAL_RANK; exec "$0" "$@"' \
    "$TITAN" train --config "$CONFIG" "$@"
fi
exec "${launcher[@]}" "$TITAN" train --config "$CONFIG" "$@"
