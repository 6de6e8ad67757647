#!/usr/bin/env bash
# Starts one MPI rank inside its emulated node (benchmarks/training/netns.py): rank r runs
# in network namespace hpcopt-n<r / HPCOPT_LINK_PER_NODE>, with that name as its host name
# (a UTS namespace of its own), so MPI, torch and hpcopt see separate nodes.
set -euo pipefail
rank=${PMI_RANK:-${OMPI_COMM_WORLD_RANK:?on_node.sh runs under mpiexec}}
node="hpcopt-n$(( rank / ${HPCOPT_LINK_PER_NODE:?} ))"
exec ip netns exec "$node" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$node" "$@"
