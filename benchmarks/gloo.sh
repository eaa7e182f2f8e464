#!/usr/bin/env bash
# gohccl against Gloo on this host, interleaved in one torchrun job per
# collective: 2 ranks, and 4 ranks (oversubscribed on a 2-core machine),
# 4 KiB to 64 MiB, as in issue 5. Extra arguments go to gohccl.bench.
# Usage: benchmarks/gloo.sh [-np "2 4"] [gohccl.bench args...]
set -euo pipefail
cd "$(dirname "$0")/.."
nps="2 4"
if [[ "${1:-}" == -np ]]; then nps=$2; shift 2; fi
make -s build
for np in $nps; do
	# gohccl.bench runs a communicator's trial (GOHCCL_TUNE, docs/algorithms.md
	# "Measured choices") untimed before the warm-up; more ranks than cores
	# take longer to settle into a stream, so they warm up longer.
	warm=2
	((np > $(nproc))) && warm=9
	for c in all_reduce all_gather reduce_scatter broadcast; do
		echo "## $c, $np ranks"
		.venv/bin/python -m gohccl.bench --nproc "$np" -c "$c" -b 4K -e 64M -f 4 \
			-n 10 -w "$warm" --block 5 --check --no-progress "$@"
	done
done
