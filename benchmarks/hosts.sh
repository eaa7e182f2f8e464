#!/usr/bin/env bash
# gohccl against Gloo across emulated hosts (tests/netns.py: one network
# namespace, /dev/shm and hostname per host, joined by a bridge), interleaved
# in one torchrun job per shape: 2 hosts x 1 rank (TCP only) and 2 hosts x 2
# ranks (shared memory inside a host, TCP across), 4 KiB to 64 MiB.
# Needs root. Extra arguments go to gohccl.bench and override its defaults
# here (the last -c, -b, -e ... wins), e.g. --algo auto,ring,tree --json f.json.
#
# Usage: benchmarks/hosts.sh [--shapes "2x1 2x2"] [--rate 1gbit] [gohccl.bench args...]
#   --shapes  HOSTSxRANKS words (default "2x1 2x2")
#   --rate    shape every link to this tc rate, both directions (default unshaped)
# The seed's comparison (issue 17):
#   benchmarks/hosts.sh --shapes 4x2 --rate 1gbit -c all_reduce -b 64K -e 16M -f 16 \
#     --algo 'auto,ring,tree,dtree,rhd,level0:ring;level1:tree'
set -euo pipefail
cd "$(dirname "$0")/.."
shapes="2x1 2x2"
rate=()
while [[ $# -gt 0 ]]; do
	case "$1" in
	--shapes) shapes=$2; shift 2 ;;
	--rate) rate=(--rate "$2"); shift 2 ;;
	*) break ;;
	esac
done
if [[ $(id -u) -ne 0 ]]; then
	echo "benchmarks/hosts.sh: emulated hosts need root (network namespaces)" >&2
	exit 2
fi
make -s build
# Gloo binds what the hostname resolves to (loopback on these hosts) unless
# told its interface; tests/netns.py sets GLOO_SOCKET_IFNAME for it. gohccl
# gets no such variable. OMP_NUM_THREADS=1 as torchrun would set it, minus
# its banner; c10d's warnings about reverse lookups are noise here.
export OMP_NUM_THREADS=1 TORCH_CPP_LOG_LEVEL=ERROR
for shape in $shapes; do
	hosts=${shape%x*}
	local_ranks=${shape#*x}
	echo "## $hosts hosts x $local_ranks ranks, links ${rate[1]:-unshaped}"
	.venv/bin/python tests/netns.py up --hosts "$hosts" "${rate[@]}" --no-prefix -- \
		.venv/bin/python -m torch.distributed.run --nnodes "$hosts" --node-rank '{host}' \
		--nproc-per-node "$local_ranks" --master-addr '{master}' --master-port 29500 \
		-m gohccl.bench -c all_reduce,all_gather,reduce_scatter,broadcast -b 4K -e 64M -f 4 \
		-n 10 -w 2 --block 5 --check --no-progress "$@"
done
