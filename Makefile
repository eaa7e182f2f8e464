# gohccl: the two commands a user needs are `make demo` and `make test`.
# Every target installs what it needs, idempotently: a virtualenv at .venv
# with torch and the test dependencies from PyPI, the Go modules, and the
# build of libgohccl.so and the torch extension.

PYTHON  ?= python3
# VENV and TORCH can be set from the environment or the command line, e.g.
# `TORCH=torch==2.15.0 make test` or `VENV=../venv-215 TORCH=torch==2.15.0 make test`
# (supported: torch 2.14.x and 2.15.x; README, setup.py's TORCH_RANGE).
VENV    ?= .venv
PY      := $(VENV)/bin/python
PIP     := $(VENV)/bin/pip
TORCH   ?= torch==2.14.1
GO      ?= go

GO_SRC  := $(shell find goimpl capi -name '*.go' -o -name '*.s' -o -name '*.h' 2>/dev/null)
CXX_SRC := $(wildcard csrc/*.cpp csrc/*.hpp) setup.py
BUILT   := $(VENV)/.gohccl-built

.PHONY: demo test build go-test go-vet py-test capi-test clean bench-gloo bench-mpi-setup bench-mpi \
	test-hosts bench-hosts bench-seed wheel-check bench-train FORCE

# The Python environment: torch and the test tools. $(VENV)/.torch holds the
# torch requirement it was made with and is rewritten only when TORCH
# changes, so a different TORCH reinstalls (and so rebuilds the extension).
# A venv made before this stamp existed was made with the default: its stamp
# is created no newer than .deps, so it rebuilds nothing.
TORCH_STAMP := $(VENV)/.torch
$(TORCH_STAMP): FORCE
	@mkdir -p $(VENV)
	@if [ ! -e $@ ] && [ -e $(VENV)/.deps ] && [ "$(TORCH)" = "torch==2.14.1" ]; then \
		echo "$(TORCH)" > $@; touch -r $(VENV)/.deps $@; \
	elif [ "$$(cat $@ 2>/dev/null)" != "$(TORCH)" ]; then echo "$(TORCH)" > $@; fi

$(VENV)/.deps: requirements-dev.txt $(TORCH_STAMP)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q "$(TORCH)" -r requirements-dev.txt
	touch $@

FORCE:

go.sum.stamp := $(VENV)/.gomod
$(go.sum.stamp): go.mod go.sum | $(VENV)/.deps
	$(GO) mod download
	touch $@

# libgohccl.so and the extension, rebuilt when any source changes.
$(BUILT): $(VENV)/.deps $(go.sum.stamp) $(GO_SRC) $(CXX_SRC)
	MAX_JOBS=2 $(PIP) install -q --no-build-isolation --no-deps -e .
	touch $@

build: $(BUILT)

go-vet: $(go.sum.stamp)
	$(GO) vet ./...

go-test: $(go.sum.stamp)
	$(GO) test -count=1 -timeout 20m ./...

# The suite runs twice: over the default transports (shared memory between
# the ranks of this host) and with GOHCCL_TRANSPORT=tcp, the path ranks on
# different hosts take.
# The second pass leaves out the suites whose subject is not the transport
# (packaging and tools, the benchmark's CLI, the flight recorder's dumps):
# they ran in the first.
ONCE := tests/test_packaging.py tests/test_bench.py tests/test_trace.py tests/test_build_vars.py
py-test: $(BUILT)
	$(PY) -m pytest tests -q
	GOHCCL_TRANSPORT=tcp $(PY) -m pytest tests -q $(addprefix --ignore ,$(ONCE))

capi-test: $(BUILT)
	cmake -S . -B build/cmake -G Ninja -DGOHCCL_PYTHON=$(CURDIR)/$(PY) >/dev/null
	cmake --build build/cmake -j 2
	cd build/cmake && ctest --output-on-failure

test: go-vet go-test capi-test py-test

# The package as a pip user gets it (slow: builds the wheel from scratch):
# `pip wheel` here, then installed into a fresh venv that has this torch and
# no Go on PATH, and used from torchrun without `import gohccl`, plus
# `python -m gohccl.info` and `python -m gohccl.sim`. tests/test_packaging.py.
# GOHCCL_WHEEL=path/to.whl checks a wheel built before instead.
wheel-check: $(VENV)/.deps
	GOHCCL_WHEEL_CHECK=1 $(PY) -m pytest tests/test_packaging.py -q -k wheel

demo: $(BUILT)
	$(VENV)/bin/torchrun --standalone --nproc-per-node 2 benchmarks/demo_ddp.py

# Benchmarks (not part of `make test`): against Gloo in one torchrun job per
# collective, and against Open MPI and MPICH (the setup target installs them
# and mpi4py).
bench-gloo: $(BUILT)
	benchmarks/gloo.sh

bench-mpi-setup: $(BUILT)
	benchmarks/mpi.sh setup

bench-mpi: $(BUILT)
	benchmarks/mpi.sh -np 2

# DDP training throughput, gohccl against Gloo alternating in one job, 2 and 4
# ranks, a GPT-style LM and a CNN (benchmarks/train.py). The default is quick
# (a few minutes); TRAIN_ARGS=--long runs several hundred steps per run.
bench-train: $(BUILT)
	$(PY) benchmarks/train.py $(TRAIN_ARGS)

# Across emulated hosts (needs root; tests/netns.py, docs/hosts.md): the host
# suite alone, and gohccl against Gloo at 2 hosts x 1 and x 2 ranks.
# HOSTS_ARGS passes options, e.g. HOSTS_ARGS="--rate 1gbit -c all_reduce".
test-hosts: $(BUILT)
	$(PY) -m pytest tests/test_hosts.py -q

bench-hosts: $(BUILT)
	benchmarks/hosts.sh $(HOSTS_ARGS)

# The seed's comparison (issue 17): all_reduce forced to each schedule and
# automatic on 4 emulated hosts x 2 ranks, shaped links, beside gohccl-sim
# with the link figures measured at init. SEED_ARGS, e.g. "--rate 200mbit".
bench-seed: $(BUILT)
	benchmarks/seed.sh $(SEED_ARGS)

clean:
	rm -rf build python/gohccl/lib python/gohccl/*.so $(BUILT)
