#!/bin/bash
# A throwaway Slurm cluster on this machine for the integration tests: munged,
# slurmctld and two slurmd ("node0", "node1", 2 CPUs each), every file (config,
# munge key, sockets, state, logs) in one folder, nothing under /etc or /var.
#   tests/scripts/slurm_cluster.sh start DIR   # prints `export SLURM_CONF=DIR/slurm.conf`
#   tests/scripts/slurm_cluster.sh stop DIR    # stops its daemons, jobs and their processes
# Both slurmd listen on 127.0.0.1, each on a port of its own (NodeName ...
# Port=), and each runs in a UTS namespace whose host name is its node's, so a
# job's `hostname` and SLURMD_NODENAME agree as on a real cluster (-N names
# the node explicitly as well). Network and /tmp stay shared: per-node spool and
# TmpFS folders keep the two slurmd (and PMIx) apart.
# Ports come from the folder's name hash so that parallel clusters differ.
# Must run as root (slurmd launches job steps as the submitting user).
set -euo pipefail

action=${1:?usage: slurm_cluster.sh start|stop DIR}
dir=$(realpath -m "${2:?usage: slurm_cluster.sh start|stop DIR}")

# Every live process of this cluster: its daemons (their pid files) and the
# slurmstepd that run its job steps (they work in the slurmd's folder, DIR).
cluster_pids() {
  local pid
  for pid in $(cat "$dir"/*.pid 2>/dev/null) $(pgrep -x slurmstepd 2>/dev/null); do
    [ -r "/proc/$pid/cwd" ] || continue
    case "$(readlink "/proc/$pid/cwd" 2>/dev/null)" in
    "$dir" | "$dir"/*) echo "$pid" ;;
    *) case "$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" in *"$dir"*) echo "$pid" ;; esac ;;
    esac
  done
}

with_descendants() {
  local pid child
  for pid in "$@"; do
    echo "$pid"
    for child in $(pgrep -P "$pid" 2>/dev/null || true); do with_descendants "$child"; done
  done
}

stop_cluster() {
  # Jobs first, while slurmctld runs: their steps end as Slurm ends them.
  if [ -f "$dir"/slurm.conf ] && [ -s "$dir"/slurmctld.pid ] && kill -0 "$(cat "$dir"/slurmctld.pid)" 2>/dev/null; then
    local jobs
    jobs=$(SLURM_CONF="$dir"/slurm.conf timeout 5 squeue -h -o %A 2>/dev/null || true)
    if [ -n "$jobs" ]; then
      # shellcheck disable=SC2086 # one job id per word
      SLURM_CONF="$dir"/slurm.conf timeout 5 scancel --signal=KILL --full $jobs 2>/dev/null || true
      # shellcheck disable=SC2086
      SLURM_CONF="$dir"/slurm.conf timeout 5 scancel $jobs 2>/dev/null || true
    fi
  fi
  # Then every process left, by id: job processes before the daemons that watch them.
  local pids
  # shellcheck disable=SC2046 # one pid per word
  pids=$(with_descendants $(cluster_pids))
  # shellcheck disable=SC2086
  [ -z "$pids" ] || kill -KILL $pids 2>/dev/null || true
  for _ in $(seq 50); do
    [ -z "$(cluster_pids)" ] && break
    sleep 0.1
  done
  rm -f "$dir"/*.pid
}

case "$action" in
stop)
  stop_cluster
  exit 0
  ;;
start) ;;
*)
  echo "slurm_cluster.sh: unknown action '$action' (expected start or stop)" >&2
  exit 1
  ;;
esac

for tool in munged slurmctld slurmd srun sbatch scontrol; do
  command -v "$tool" >/dev/null || { echo "slurm_cluster.sh: $tool is not installed (scripts/setup.sh installs Slurm)" >&2; exit 2; }
done
[ "$(id -u)" = 0 ] || { echo "slurm_cluster.sh: needs root (slurmd starts job steps as the submitting user)" >&2; exit 2; }
unshare --uts true 2>/dev/null || { echo "slurm_cluster.sh: cannot make a UTS namespace here (unshare --uts)" >&2; exit 2; }

mkdir -p "$dir"/state "$dir"/spool/node0 "$dir"/spool/node1 "$dir"/tmp/node0 "$dir"/tmp/node1 "$dir"/munge
chmod 711 "$dir"/munge
# Ports in 20000-39999 from the folder's hash: two test folders rarely collide.
base=$((20000 + $(printf '%s' "$dir" | cksum | cut -d' ' -f1) % 5000 * 4))
ctl_port=$base
node0_port=$((base + 1))
node1_port=$((base + 2))

dd if=/dev/urandom of="$dir"/munge/munge.key bs=1024 count=1 status=none
chmod 600 "$dir"/munge/munge.key
munged --force --key-file="$dir"/munge/munge.key --socket="$dir"/munge/munge.sock \
  --pid-file="$dir"/munged.pid --log-file="$dir"/munged.log --seed-file="$dir"/munge/seed

cat >"$dir"/slurm.conf <<EOF
ClusterName=titantest
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$ctl_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# cred_expire: a requeued job waits this long (+1 s) before it may start again (default 120 s).
AuthInfo=socket=$dir/munge/munge.sock,cred_expire=5
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
# Per node: PMIx makes its per-step folders there, and both nodes share one /tmp.
TmpFS=$dir/tmp/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
# A requeued job starts as soon as it is eligible (the main loop runs every 60 s by default).
SchedulerParameters=sched_interval=1
SlurmdParameters=config_overrides
MpiDefault=pmix
ReturnToService=2
JobRequeue=1
KillWait=30
MinJobAge=600
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
Waittime=0
NodeName=node0 NodeHostname=node0 NodeAddr=127.0.0.1 Port=$node0_port CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN
NodeName=node1 NodeHostname=node1 NodeAddr=127.0.0.1 Port=$node1_port CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=node0,node1 Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
export SLURM_CONF="$dir"/slurm.conf

slurmctld -c -f "$SLURM_CONF"
for node in node0 node1; do
  # shellcheck disable=SC2016 # expanded by the inner shell
  unshare --uts sh -c 'hostname "$0" && exec slurmd -f "$1" -N "$0"' "$node" "$SLURM_CONF"
done

# Ready: both nodes idle.
for _ in $(seq 150); do
  if [ "$(sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | wc -l)" = 2 ]; then
    echo "export SLURM_CONF=$SLURM_CONF"
    exit 0
  fi
  sleep 0.2
done
echo "slurm_cluster.sh: the nodes did not come up in 30 s; sinfo says:" >&2
sinfo -N >&2 || true
tail -n 20 "$dir"/slurmctld.log "$dir"/slurmd.node0.log "$dir"/slurmd.node1.log >&2 || true
stop_cluster
exit 3
