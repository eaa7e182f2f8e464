#!/usr/bin/env bash
# gohccl against Open MPI on this host, as in issue 5:
#   1. the C ABI alone (build/capi_vs_mpi: MPI_Allreduce and gohccl_allreduce
#      on the same memory, interleaved, in one mpirun job);
#   2. through torch: python -m gohccl.bench under mpirun, where every process
#      times MPI (mpi4py, on the tensor's memory) and dist.all_reduce on gohccl,
#      interleaved. Gloo is left out of this job: a Gloo block keeps a rank out
#      of gohccl's Go runtime for more than 10 ms at the larger sizes, after
#      which gohccl's next calls pay the runtime's wake-ups (docs/mesh.md, "The
#      Go runtime's monitor thread"); benchmarks/gloo.sh times Gloo. Pass
#      --backends gohccl,gloo,mpi to see all three in one job.
# Usage: benchmarks/mpi.sh setup            (once), then
#        benchmarks/mpi.sh [-np N] [extra gohccl.bench args...]
# "setup" installs Open MPI (Debian's openmpi-bin, libopenmpi-dev) and mpi4py
# into .venv, once; `make test` never needs them.
set -euo pipefail
cd "$(dirname "$0")/.."
np=2
if [[ "${1:-}" == setup ]]; then
	shift
	if ! command -v mpicc >/dev/null; then
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq openmpi-bin libopenmpi-dev
	fi
	make build
	.venv/bin/python -c 'import mpi4py' 2>/dev/null || .venv/bin/pip install -q mpi4py
	exit 0
fi
if [[ "${1:-}" == -np ]]; then np=$2; shift 2; fi
command -v mpirun >/dev/null || { echo "no mpirun: run benchmarks/mpi.sh setup" >&2; exit 2; }
mpirun=(mpirun -np "$np" --oversubscribe --bind-to none)
[[ $(id -u) == 0 ]] && mpirun+=(--allow-run-as-root)

mkdir -p build
lib=$PWD/python/gohccl/lib
mpicc -O2 -Wall -Wextra -o build/capi_vs_mpi benchmarks/capi_vs_mpi.c \
	-Icapi/include -L"$lib" -lgohccl -Wl,-rpath,"$lib"
for op in allreduce allgather reduce_scatter broadcast; do
	echo "## C ABI, $op, $np ranks"
	"${mpirun[@]}" build/capi_vs_mpi -o "$op" -b 4096 -e 67108864 -f 4 -n 50 -r 5
done
echo "## torch, all_reduce, $np ranks"
"${mpirun[@]}" .venv/bin/python -m gohccl.bench --backends gohccl,mpi \
	-c all_reduce -b 4K -e 64M -f 4 -n 20 -w 2 --block 5 --no-progress "$@"
