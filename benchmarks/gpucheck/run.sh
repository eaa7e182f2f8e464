#!/usr/bin/env bash
# The GPU check of docs/devices.md ("Measured on a GPU"), in one command on a
# machine with a CUDA GPU, python3 with a CUDA torch, a C++ compiler and
# ninja; no Go and no network needed when a prebuilt libgohccl.so is given:
#
#   benchmarks/gpucheck/run.sh [path/to/libgohccl.so]
#
# It copies the sources it needs (setup.py, csrc, capi/include, python) to
# $GPUCHECK_BUILD (default /tmp/gpucheck-build), applies
# torch-pre-2.14.patch there when torch is older than 2.14 (renamed Backend
# hooks; the product supports 2.14-2.15), builds the extension against that
# torch (ANY_TORCH=1, LIBGOHCCL=<the library>, or Go builds one when no
# library is given), then runs, each step under its own timeout and going on
# past a failed step:
#   capi_check.py    the C ABI on device memory, every operation; the staged
#                    all-reduce against its copies and its host collective
#   torch_check.py   torchrun, 2 ranks on the GPU(s): every primitive, dtype
#                    and op on CUDA tensors against references, async work,
#                    stream order, DDP against Gloo and a reference, timings
#   torch_check.py --mode nccl   DDP over NCCL (refused with 2 ranks on 1 GPU)
# The log goes to $OUT/gpucheck.log (OUT defaults to ./gpucheck-out); the
# last lines are a summary: PASS/FAIL counts, every FAIL, the TIME lines.
# GPUCHECK_DEVICE=cpu GPUCHECK_FAKE_CUDA=build/cmake/doubles/libcudart.so.12
# runs the same steps without a GPU (how the script is tried here);
# GPUCHECK_PROBE=1 runs the probes (probe.py under segv.so) even when
# torch_check passes; GPUCHECK_SKIP="capi_check nccl ..." skips those steps
# (a probe step is probe_<case>; GPUCHECK_SKIP=probes skips them all).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
OUT=${OUT:-$PWD/gpucheck-out}
mkdir -p "$OUT"
LOG=$OUT/gpucheck.log
: >"$LOG"
exec > >(tee -a "$LOG") 2>&1
PY=${PYTHON:-python3}
LIB=${1:-${LIBGOHCCL:-}}
[ -n "$LIB" ] && LIB=$(cd "$(dirname "$LIB")" && pwd)/$(basename "$LIB")
BUILD=${GPUCHECK_BUILD:-/tmp/gpucheck-build}
DEVICE=${GPUCHECK_DEVICE:-cuda}
MIB=${GPUCHECK_MIB:-64,256}
export PYTHONUNBUFFERED=1

step() {
	local name=$1 limit=$2
	shift 2
	case " ${GPUCHECK_SKIP:-} " in *" $name "*)
		echo "=== SKIP $name (GPUCHECK_SKIP)"
		return 0
		;;
	esac
	echo "=== STEP $name (limit ${limit}s)"
	local t0=$SECONDS
	if [ "$(type -t "$1")" = function ]; then
		timeout --kill-after=10 "$limit" bash -c "$1"
	else
		timeout --kill-after=10 "$limit" "$@"
	fi
	local rc=$?
	echo "=== END $name: rc=$rc, $((SECONDS - t0)) s"
	return $rc
}

environment() {
	date -u
	uname -a
	nproc
	free -g | head -2
	df -h /dev/shm /tmp | tail -2
	nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1 | head -3
	"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available(), "devices", torch.cuda.device_count(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
	"$PY" -c 'import torch; print("nccl", torch.cuda.nccl.version() if torch.cuda.is_available() else "-")' 2>&1 | tail -1
	(nvcc --version 2>&1 | tail -2; g++ --version | head -1; ninja --version) 2>&1
	echo "libgohccl: ${LIB:-built with Go}"
}

build() {
	rm -rf "$BUILD" && mkdir -p "$BUILD/capi" || return 1
	cp -r "$SRC/setup.py" "$SRC/pyproject.toml" "$SRC/README.md" "$SRC/csrc" "$SRC/python" "$BUILD/" || return 1
	cp -r "$SRC/capi/include" "$BUILD/capi/" || return 1
	[ -z "$LIB" ] && { cp -r "$SRC/capi" "$SRC/goimpl" "$SRC/go.mod" "$SRC/go.sum" "$BUILD/" || return 1; }
	rm -f "$BUILD"/python/gohccl/_C*.so "$BUILD"/python/gohccl/lib/libgohccl.so
	local old
	old=$("$PY" -c 'import re, torch; m = re.match(r"(\d+)\.(\d+)", torch.__version__); print(int((int(m[1]), int(m[2])) < (2, 14)))') || return 1
	if [ "$old" = 1 ]; then
		echo "torch older than 2.14: applying torch-pre-2.14.patch to the copy"
		patch -p1 -d "$BUILD" <"$HERE/torch-pre-2.14.patch" || return 1
	fi
	# The extension must share torch's C++ runtime (the shared libstdc++). A
	# compiler that links libstdc++ into it statically (the H200 image's CXX,
	# /opt/gcc/bin/g++) puts two runtimes in one process, and every process
	# died of SIGSEGV in std::locale at its first collective. So: the system
	# g++ (GPUCHECK_CXX to choose another), and a check of the result.
	local cxx=${GPUCHECK_CXX:-$(command -v /usr/bin/g++ || command -v g++)}
	local cc=${cxx%++}cc
	[ -x "$cc" ] || cc=${cxx%g++}gcc
	echo "CXX=$cxx ($("$cxx" --version | head -1)), CC=$cc; the environment had CXX=${CXX:-unset} CC=${CC:-unset} LDSHARED=${LDSHARED:-unset}"
	local try extra=()
	for try in 1 2; do
		# the second try also names the linker, in case LDSHARED kept the other compiler
		[ "$try" = 2 ] && extra=(LDSHARED="$cxx -shared")
		(cd "$BUILD" && rm -rf build python/gohccl/_C*.so && env CXX="$cxx" CC="$cc" ANY_TORCH=1 LIBGOHCCL="$LIB" \
			MAX_JOBS="$(nproc)" "${extra[@]}" "$PY" setup.py -q build_ext --inplace) || return 1
		readelf -d "$BUILD"/python/gohccl/_C*.so | grep NEEDED
		readelf -d "$BUILD"/python/gohccl/_C*.so | grep -q 'libstdc++' && break
		echo "try $try: the extension does not load the shared libstdc++ (linked statically): it would crash beside torch"
		[ "$try" = 2 ] && return 1
	done
	ls -la "$BUILD"/python/gohccl/_C*.so "$BUILD"/python/gohccl/lib/
}

summary() {
	local snap=$LOG.snap
	cp "$LOG" "$snap"
	echo "=================== SUMMARY"
	grep -aE "^=== END|^(torch|python|NVIDIA|name,) " "$snap"
	grep -aE "INFO device:" "$snap" | sed 's/^\[gohccl [0-9]*\/[0-9]*\] //' | sort | uniq -c
	echo "PASS lines: $(grep -acE '^PASS ' "$snap"), FAIL lines: $(grep -acE '^FAIL ' "$snap")"
	grep -aE "^FAIL |FAIL:|Traceback|Error" "$snap" | sort | uniq -c | sort -rn | head -40
	grep -aE "^(TIME|SUMMARY|NCCL|[ABC]\. |   (staged|host|copies|max)|PASS DDP|FAIL DDP|probe |segv.so|  (pc|frame) )" "$snap"
	rm -f "$snap"
}

export PYTHONPATH=$BUILD/python${PYTHONPATH:+:$PYTHONPATH}
export PY LIB BUILD SRC HERE LOG
export -f environment build summary
step environment 60 environment
step build 240 build
step import 60 "$PY" -c 'import torch, gohccl; print("gohccl", gohccl.__version__, gohccl.__file__, gohccl.DEVICES)'
CAPI=(env GOHCCL_DEBUG=INFO LIBGOHCCL="$BUILD/python/gohccl/lib/libgohccl.so" "$PY" "$HERE/capi_check.py")
if [ "$DEVICE" = cpu ]; then
	FAKE=$(cd "$(dirname "$GPUCHECK_FAKE_CUDA")" && pwd)/$(basename "$GPUCHECK_FAKE_CUDA")
	step capi_check 180 "${CAPI[@]}" --fake-cuda "$FAKE" --mib 16
else
	step capi_check 120 "${CAPI[@]}" --mib 256
fi
TORCHRUN=("$PY" -m torch.distributed.run --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29631)
step torch_check 240 env GOHCCL_DEBUG=INFO "${TORCHRUN[@]}" "$HERE/torch_check.py" \
	--device "$DEVICE" --mib "$MIB" --ddp-params "$OUT/ddp_gohccl.pt"
TC=$?
if { [ "$TC" != 0 ] || [ -n "${GPUCHECK_PROBE:-}" ]; } && [[ " ${GPUCHECK_SKIP:-} " != *" probes "* ]]; then
	# where a process dies: small cases one by one, each under segv.so (the
	# faulting library+offset and a backtrace); _C*.so comes back in $OUT for
	# its symbols
	cc -shared -fPIC -O1 -o "$BUILD/segv.so" "$HERE/segv.c" && cp "$BUILD"/python/gohccl/_C*.so "$OUT/"
	for c in cpu cuda4 cuda0 side async bcast; do
		step "probe_$c" 60 env LD_PRELOAD="$BUILD/segv.so" GOHCCL_DEBUG=TRACE TORCH_SHOW_CPP_STACKTRACES=1 \
			"${TORCHRUN[@]}" "$HERE/probe.py" --case "$c"
	done
	# the same checks over TCP between the ranks, to tell a device-path failure
	# from one of the shared-memory transport on this machine
	step torch_check_tcp 120 env GOHCCL_TRANSPORT=tcp "${TORCHRUN[@]}" "$HERE/torch_check.py" \
		--device "$DEVICE" --mib "" --skip ddp
fi
[ "$DEVICE" = cuda ] && step nccl 60 "${TORCHRUN[@]}" "$HERE/torch_check.py" \
	--device cuda --mode nccl --ddp-params "$OUT/ddp_gohccl.pt"
step summary 30 summary
