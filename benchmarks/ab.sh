#!/usr/bin/env bash
# Alternating A/B (or A/B/C...) of gohccl builds through python -m gohccl.bench:
# one job per variant per round, the order rotated every round, each job's
# rows written to OUTDIR/<variant>.<round>.csv; benchmarks/abstats.py pools
# them and says which differences are beyond the jobs' spread. On a 2-vCPU
# VM one job's figure moves 2-10x from the next one's, so only medians over
# many alternating jobs compare builds (docs/transports.md, "Beside another
# backend").
#
# Usage: benchmarks/ab.sh [-r ROUNDS] [-o OUTDIR] VARIANT... -- BENCH-ARGS...
#   VARIANT is NAME=TREE[:VAR=VALUE[:VAR=VALUE...]]: a checkout that has
#   its own .venv and build (make build there), and environment for its jobs
#   (GOHCCL_WAIT=spin, PYTHONPATH=DIR for a package with a swapped library).
#   Two variants of one tree with the same settings are an A/A control: how
#   far apart the medians of identical builds land on this machine.
# Example (the build before the wait policy against this tree, 12 rounds):
#   git worktree add ../before a7db405 && (cd ../before && make build)
#   benchmarks/ab.sh -r 12 -o build/ab before=../before main=. -- \
#       --nproc 2 -c reduce_scatter -b 4K -e 1M -f 4 -n 10 -w 2 --block 5 --check
#   .venv/bin/python benchmarks/abstats.py build/ab
set -euo pipefail
rounds=8 out=build/ab
while [[ $# -gt 0 ]]; do
	case $1 in
	-r) rounds=$2; shift 2 ;;
	-o) out=$2; shift 2 ;;
	--) shift; break ;;
	-*) echo "ab.sh: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
done
variants=()
while [[ $# -gt 0 && $1 != -- ]]; do variants+=("$1"); shift; done
[[ ${1:-} == -- ]] && shift
if ((${#variants[@]} < 2)) || (($# == 0)); then
	sed -n '2,/^set /{/^#/p}' "$0" >&2
	exit 2
fi
for v in "${variants[@]}"; do
	spec=${v#*=}
	tree=${spec%%:*}
	# abstats.py reads the variant back from the file name up to its first
	# dot, so a name is letters, digits, _ and - only.
	[[ $v =~ ^[A-Za-z0-9_-]+= ]] ||
		{ echo "ab.sh: $v: want NAME=TREE, NAME of letters, digits, _ and -" >&2; exit 2; }
	[[ -x $tree/.venv/bin/python ]] ||
		{ echo "ab.sh: $v: $tree has no .venv (run make build there)" >&2; exit 2; }
done
mkdir -p "$out"
n=${#variants[@]}
for ((r = 1; r <= rounds; r++)); do
	for ((i = 0; i < n; i++)); do
		v=${variants[$(((i + r) % n))]}
		name=${v%%=*} spec=${v#*=}
		tree=${spec%%:*} envs=()
		[[ $spec == *:* ]] && IFS=: read -r -a envs <<<"${spec#*:}"
		csv=$(realpath -m "$out/$name.$r.csv")
		if ! (cd "$tree" && env "${envs[@]}" timeout 900 .venv/bin/python -m gohccl.bench \
			--no-progress "$@" --csv "$csv" >/dev/null 2>"${csv%.csv}.err"); then
			echo "ab.sh: round $r, $name failed (${csv%.csv}.err)" >&2
		fi
	done
	echo "# round $r of $rounds done" >&2
done
