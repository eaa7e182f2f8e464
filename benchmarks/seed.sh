#!/usr/bin/env bash
# The seed's comparison measured (issue 17): ring, tree, double tree,
# halving-doubling and the hierarchy (level0 ring, level1 tree), forced one
# by one beside the automatic choice and Gloo, all_reduce on 4 emulated
# hosts x 2 ranks (tests/netns.py) whose links are shaped to a rate low
# enough that the network, not the CPU, is the bottleneck; then gohccl-sim
# with the link figures the communicators measured at init, for the same
# choices, measured and simulated side by side (benchmarks/seed_compare.py).
# Needs root.
#
# Usage: benchmarks/seed.sh [--rate 500mbit] [--hosts 4] [--ranks 2] [--sizes 64K,1M,16M]
#                           [--algos 'auto,ring,...'] [--out DIR] [gohccl.bench args...]
# Extra arguments go to gohccl.bench (-n, -w, --block override the defaults).
# Writes DIR/bench.json, DIR/bench.log (GOHCCL_DEBUG=INFO of every rank),
# DIR/sim.jsonl and DIR/seed.md (the table); DIR defaults to a new /tmp dir.
set -euo pipefail
cd "$(dirname "$0")/.."
rate=500mbit
hosts=4
ranks=2
sizes=64K,1M,16M
algos='auto,ring,tree,dtree,rhd,level0:ring;level1:tree,level0:ring;level1:ring'
out=""
while [[ $# -gt 0 ]]; do
	case "$1" in
	--rate) rate=$2; shift 2 ;;
	--hosts) hosts=$2; shift 2 ;;
	--ranks) ranks=$2; shift 2 ;;
	--sizes) sizes=$2; shift 2 ;;
	--algos) algos=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	*) break ;;
	esac
done
if [[ $(id -u) -ne 0 ]]; then
	echo "benchmarks/seed.sh: emulated hosts need root (network namespaces)" >&2
	exit 2
fi
out=${out:-$(mktemp -d /tmp/gohccl-seed.XXXXXX)}
mkdir -p "$out"
make -s build
go build -o "$out/gohccl-sim" ./goimpl/sim/cmd/gohccl-sim
# The bench's sizes: each of --sizes as both ends of a one-size sweep is
# clumsy; one sweep from the smallest to the largest by the ratio works when
# the sizes are a geometric series (the default: x16).
read -r first last factor < <(.venv/bin/python - "$sizes" <<'EOF'
import sys
units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
def parse(s):
    s = s.strip().upper().rstrip("B").rstrip("I")
    return int(float(s[:-1]) * units[s[-1]]) if s[-1] in units else int(s)
v = [parse(s) for s in sys.argv[1].split(",")]
f = v[1] / v[0] if len(v) > 1 else 2
assert all(abs(b / a - f) < 1e-9 for a, b in zip(v, v[1:])), "--sizes must be a geometric series"
print(v[0], v[-1], f)
EOF
)
export OMP_NUM_THREADS=1 TORCH_CPP_LOG_LEVEL=ERROR GOHCCL_DEBUG=INFO
echo "# seed comparison: $hosts hosts x $ranks ranks, links $rate, all_reduce $sizes; load: $(uptime)" | tee "$out/seed.md"
uptime >"$out/uptime.before"
.venv/bin/python tests/netns.py up --hosts "$hosts" --rate "$rate" -- \
	.venv/bin/python -m torch.distributed.run --nnodes "$hosts" --node-rank '{host}' \
	--nproc-per-node "$ranks" --master-addr '{master}' --master-port 29500 \
	-m gohccl.bench -c all_reduce -b "$first" -e "$last" -f "$factor" \
	-n 5 -w 17 --block 2 --check --no-progress --algo "$algos" --json "$out/bench.json" "$@" \
	2>&1 | tee "$out/bench.log" | grep -v ' INFO ' || true
uptime >"$out/uptime.after"
echo "# load after: $(cat "$out/uptime.after")" | tee -a "$out/seed.md"
.venv/bin/python benchmarks/seed_compare.py --out "$out" --sim "$out/gohccl-sim" \
	--hosts "$hosts" --ranks "$ranks" --rate "$rate" | tee -a "$out/seed.md"
echo "# written: $out/seed.md"
