#!/bin/sh
# Runs one rank of an mpirun job as if on a node of its own: "node<K>", where
# K is the rank divided by RANKS_PER_NODE (the first argument). The rank gets
# a UTS namespace whose host name is that node's, so titan's node detection
# (comm/world.h: SLURMD_NODENAME, else the host name) sees several nodes on
# one machine. Memory and links stay shared; tests that want the links of
# different machines add `--mca btl tcp,self` to mpirun.
#   mpirun -np 4 tests/scripts/as_node.sh 2 titan train ...   # node0: ranks 0-1, node1: ranks 2-3
set -eu
ranks_per_node=$1
shift
rank=${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}}
exec unshare --uts sh -c 'hostname "$0" && exec "$@"' "node$((rank / ranks_per_node))" "$@"
