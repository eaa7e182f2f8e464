#!/usr/bin/env bash
# gohccl against MPI on this host, as in issues 5 and 20:
#   1. the C ABI alone (build/capi_vs_mpi.<mpi>: the MPI collective and
#      gohccl's on the same memory, interleaved, in one mpirun job), once per
#      MPI: Open MPI and MPICH, each built with its own mpicc and started by
#      its own mpirun, for all_reduce, all_gather, reduce_scatter, broadcast;
#      then one table per collective with gohccl's speedup over each MPI at
#      every size (each ratio from its own interleaved job);
#   2. through torch: python -m gohccl.bench under Open MPI's mpirun, where
#      every process times MPI (mpi4py, on the tensor's memory) and
#      dist.all_reduce on gohccl, interleaved. Gloo is left out of this job: a
#      Gloo block keeps a rank out of gohccl's Go runtime for more than 10 ms at
#      the larger sizes, after which gohccl's next calls pay the runtime's
#      wake-ups (docs/mesh.md, "The Go runtime's monitor thread");
#      benchmarks/gloo.sh times Gloo. Pass --backends gohccl,gloo,mpi to see all
#      three in one job.
# Usage: benchmarks/mpi.sh setup            (once), then
#        benchmarks/mpi.sh [-np N] [extra gohccl.bench args...]
# Environment: MPIS="openmpi mpich" (the MPIs of part 1, default both where
# installed), CAPI_ARGS (capi_vs_mpi's sweep, default "-b 4096 -e 67108864
# -f 4 -n 50 -r 5"), CAPI_ONLY=1 (skip part 2).
# "setup" installs Open MPI (Debian's openmpi-bin, libopenmpi-dev), MPICH
# (mpich, libmpich-dev) and mpi4py (built for Open MPI) into .venv, once;
# `make test` never needs them. Both MPIs install mpicc and mpirun as
# alternatives, so this script only ever calls the implementation-specific
# names (mpicc.openmpi, mpirun.openmpi, mpicc.mpich, mpirun.mpich).
set -euo pipefail
cd "$(dirname "$0")/.."
np=2
if [[ "${1:-}" == setup ]]; then
	shift
	pkgs=()
	command -v mpicc.openmpi >/dev/null || pkgs+=(openmpi-bin libopenmpi-dev)
	command -v mpicc.mpich >/dev/null || pkgs+=(mpich libmpich-dev)
	if ((${#pkgs[@]})); then
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}"
	fi
	make build
	.venv/bin/python -c 'import mpi4py' 2>/dev/null ||
		MPICC=mpicc.openmpi .venv/bin/pip install -q mpi4py
	exit 0
fi
if [[ "${1:-}" == -np ]]; then np=$2; shift 2; fi

# mpirun_for MPI prints the launcher command line of one MPI, one word a line.
mpirun_for() {
	case $1 in
	openmpi)
		printf '%s\n' mpirun.openmpi -np "$np" --oversubscribe --bind-to none
		[[ $(id -u) == 0 ]] && printf '%s\n' --allow-run-as-root
		;;
	mpich) printf '%s\n' mpirun.mpich -launcher fork -np "$np" ;;
	esac
	return 0
}

mpis=()
for m in ${MPIS:-openmpi mpich}; do
	if command -v "mpicc.$m" >/dev/null && command -v "mpirun.$m" >/dev/null; then
		mpis+=("$m")
	else
		echo "# $m skipped: no mpicc.$m/mpirun.$m (run benchmarks/mpi.sh setup)" >&2
	fi
done
((${#mpis[@]})) || { echo "no MPI: run benchmarks/mpi.sh setup" >&2; exit 2; }
echo "# $(date -u +%FT%TZ) load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs"

mkdir -p build
lib=$PWD/python/gohccl/lib
ops=(allreduce allgather reduce_scatter broadcast)
for m in "${mpis[@]}"; do
	"mpicc.$m" -O2 -Wall -Wextra -o "build/capi_vs_mpi.$m" benchmarks/capi_vs_mpi.c \
		-Icapi/include -L"$lib" -lgohccl -Wl,-rpath,"$lib"
	mapfile -t run < <(mpirun_for "$m")
	for op in "${ops[@]}"; do
		echo "## C ABI vs $m, $op, $np ranks"
		# shellcheck disable=SC2086 # CAPI_ARGS is a list of words
		"${run[@]}" "build/capi_vs_mpi.$m" -o "$op" ${CAPI_ARGS:--b 4096 -e 67108864 -f 4 -n 50 -r 5} |
			tee "build/capi_vs_mpi.$m.$op.txt"
	done
done

# One table per collective: gohccl's speedup over each MPI, size by size.
for op in "${ops[@]}"; do
	echo "## C ABI, $op, $np ranks: MPI time / gohccl time, each from its own interleaved job"
	printf '%12s' "size(B)"
	for m in "${mpis[@]}"; do printf ' %12s %12s %9s' "$m us" "gohccl us" "speedup"; done
	echo
	awk -v n="${#mpis[@]}" '
		FNR == 1 { f++ }
		/^#/ || $1 == "size(B)" { next }
		{ if (!($1 in seen)) { seen[$1] = 1; order[++k] = $1 }
		  cell[$1, f] = sprintf(" %12s %12s %9s", $3, $6, $9) }
		END { for (i = 1; i <= k; i++) { s = order[i]; line = sprintf("%12s", s)
		        for (j = 1; j <= n; j++) line = line ((s, j) in cell ? cell[s, j] : sprintf(" %12s %12s %9s", "-", "-", "-"))
		        print line } }
	' $(for m in "${mpis[@]}"; do echo "build/capi_vs_mpi.$m.$op.txt"; done)
done

[[ -n "${CAPI_ONLY:-}" ]] && exit 0
if ! command -v mpirun.openmpi >/dev/null || ! .venv/bin/python -c 'import mpi4py' 2>/dev/null; then
	echo "# torch part skipped: needs mpirun.openmpi and mpi4py (benchmarks/mpi.sh setup)" >&2
	exit 0
fi
mapfile -t run < <(mpirun_for openmpi)
echo "## torch, all_reduce, $np ranks (Open MPI)"
"${run[@]}" .venv/bin/python -m gohccl.bench --backends gohccl,mpi \
	-c all_reduce -b 4K -e 64M -f 4 -n 20 -w 2 --block 5 --no-progress "$@"
