#!/usr/bin/env bash
# Checks scripts/run_train.sh with a stand-in for titan that reports what each
# rank got: the ranks started, the arguments passed through, OMP_NUM_THREADS
# (cores / NPROC unless set) and the MPI setting; and the usage errors.
set -uo pipefail
repo="$1"
script="$repo/scripts/run_train.sh"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
failures=0
check() {  # check DESCRIPTION COMMAND...
  if ! "${@:2}"; then
    echo "FAILED: $1"
    failures=$((failures + 1))
  fi
}

cat > "$work/titan" <<'STUB'
#!/usr/bin/env bash
echo "rank=${OMPI_COMM_WORLD_RANK:-none} size=${OMPI_COMM_WORLD_SIZE:-none} omp=${OMP_NUM_THREADS:-unset} yield=${OMPI_MCA_mpi_yield_when_idle:-unset} args=$(printf '[%s]' "$@")"
STUB
chmod +x "$work/titan"
echo '[job]' > "$work/job.toml"

cores="$(nproc)"
expected_threads=$((cores / 2 > 0 ? cores / 2 : 1))
out="$(env -u OMP_NUM_THREADS "$script" NPROC=2 CONFIG="$work/job.toml" TITAN="$work/titan" --training.steps 3 --job.description 'two words' 2>&1)"
echo "$out"
for rank in 0 1; do
  check "rank $rank started with everything" grep -qxF \
    "rank=$rank size=2 omp=$expected_threads yield=1 args=[train][--config][$work/job.toml][--training.steps][3][--job.description][two words]" <<< "$out"
done
check "exactly two ranks" test "$(grep -c '^rank=' <<< "$out")" -eq 2

out="$(OMP_NUM_THREADS=3 "$script" NPROC=3 CONFIG="$work/job.toml" TITAN="$work/titan" 2>&1)"
check "a preset OMP_NUM_THREADS is kept" test "$(grep -c 'size=3 omp=3 ' <<< "$out")" -eq 3

out="$(env -u OMP_NUM_THREADS "$script" NPROC=$((cores * 4)) CONFIG="$work/job.toml" TITAN="$work/titan" 2>&1)"
check "more ranks than cores: one thread each" test "$(grep -c ' omp=1 ' <<< "$out")" -eq $((cores * 4))

out="$("$script" NPROC=2 TITAN="$work/titan" 2>&1)"
check "CONFIG is required" test $? -eq 2
check "CONFIG error says so" grep -q "CONFIG=path/to/job.toml is required" <<< "$out"
out="$("$script" NPROC=0 CONFIG="$work/job.toml" TITAN="$work/titan" 2>&1)"
check "NPROC=0 is refused" grep -q "NPROC must be a positive integer, got '0'" <<< "$out"
out="$("$script" CONFIG="$work/missing.toml" TITAN="$work/titan" 2>&1)"
check "a missing config is named" grep -q "config file '$work/missing.toml' not found" <<< "$out"

if [[ $failures -ne 0 ]]; then
  echo "run_train.sh: $failures check(s) failed"
  exit 1
fi
echo "run_train.sh: all checks passed"
