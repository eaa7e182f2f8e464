"""gohccl.bench: an nccl-tests style benchmark of gohccl, with Gloo (and MPI)
measured side by side in the same job.

    torchrun --standalone --nproc-per-node 2 -m gohccl.bench -b 8 -e 32M -f 2
    python -m gohccl.bench --nproc 2 -c all_reduce -b 8 -e 32M -f 2 --check
    mpirun -np 2 python -m gohccl.bench --backends gohccl,gloo,mpi

It prints what nccl-tests prints, one row per message size: size, count,
type, redop, root, then time (us), algbw and busbw (decimal GB/s) and #wrong
for every backend, and each non-Gloo backend's speedup over Gloo. docs/bench.md
says what each column means and how it is measured.

Terms used below:
  label      one column group of the table: a torch.distributed backend
             ("gloo"), gohccl with one GOHCCL_ALGO ("gohccl/ring"), or "mpi".
  case       one (collective, dtype, redop, size): one row of the table.
  sample     the wall time of a block of back-to-back blocking calls of one
             label on one rank, divided by the calls (--block, default 10).
  time       for each label and case: every rank takes the median (or, with
             --stat mean, the mean) of its samples; the time reported is the
             largest of those per-rank values, so the slowest rank sets it.
  size       nccl-tests' S: the larger of a rank's send and receive buffers,
             in bytes. For all_gather that is the gathered output, for
             reduce_scatter the input, for all_to_all the whole send buffer.
  count      the count argument the NCCL API would take: elements per rank
             for all_gather and reduce_scatter, per peer for all_to_all, the
             whole buffer otherwise.

Labels are interleaved within one job, A B A B, one sample (block) of each per
iteration, on the same tensors, so a machine that speeds up or slows down
during the sweep moves every label alike.

Process model. Under torchrun (RANK and WORLD_SIZE set) every process is a
rank. Under mpirun the ranks come from MPI (mpi4py if installed, else the
launcher's environment). Otherwise the command launches itself under torchrun
with --nproc ranks (default 2); --nproc 1 runs one rank in this process. The
launcher only ever starts fresh interpreters (subprocess, exec): the Go
runtime inside gohccl does not survive fork().

Test hook: GOHCCL_BENCH_CORRUPT (read only by the --check path, never by the
timed path) names labels, comma separated, or "*": on every rank whose result
is verified, the first element of such a label's result is altered after the
collective returns and before it is compared, so a test can see that --check
counts it in #wrong. It exists for tests/test_bench.py; it has no other use.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable

# --------------------------------------------------------------------------
# Pure definitions: collectives, bandwidth formulas, sizes, dtypes
# --------------------------------------------------------------------------

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce",
               "all_to_all", "sendrecv")

# Collectives that take a reduction operator; the others print redop "none".
REDUCING = ("all_reduce", "reduce_scatter", "reduce")
# Collectives that take a root; the others print root -1.
ROOTED = ("broadcast", "reduce")

OPS = ("sum", "prod", "max", "min", "avg")

# (torch dtype name, name nccl-tests prints, accepted spellings)
_DTYPE_TABLE = (
    ("float32", "float", ("float", "float32", "fp32")),
    ("float64", "double", ("double", "float64", "fp64")),
    ("float16", "half", ("half", "float16", "fp16")),
    ("bfloat16", "bfloat16", ("bfloat16", "bf16")),
    ("int8", "int8", ("int8",)),
    ("uint8", "uint8", ("uint8",)),
    ("int16", "int16", ("int16",)),
    ("int32", "int32", ("int32", "int")),
    ("int64", "int64", ("int64",)),
)
DTYPES = tuple(row[0] for row in _DTYPE_TABLE)
NCCL_TYPE_NAME = {row[0]: row[1] for row in _DTYPE_TABLE}
_DTYPE_ALIASES = {alias: row[0] for row in _DTYPE_TABLE for alias in row[2]}
ELEMENT_SIZE = {"float32": 4, "float64": 8, "float16": 2, "bfloat16": 2, "int8": 1,
                "uint8": 1, "int16": 2, "int32": 4, "int64": 8}
FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
# Distance from 1.0 to the next float of each dtype; the --check tolerance
# for sum and avg is a multiple of it.
EPS = {"float32": 2.0**-23, "float64": 2.0**-52, "float16": 2.0**-10, "bfloat16": 2.0**-7}


def bus_factor(collective: str, nranks: int) -> float:
    """bus_factor is nccl-tests' correction from algorithm bandwidth to bus
    bandwidth: the fraction of S that crosses the busiest link per rank in an
    optimal schedule (doc/PERFORMANCE.md of nccl-tests)."""
    n = nranks
    if n < 1:
        raise ValueError(f"bus_factor: {n} ranks")
    if collective == "all_reduce":
        return 2.0 * (n - 1) / n
    if collective in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if collective in ("broadcast", "reduce", "sendrecv"):
        return 1.0
    raise ValueError(f"bus_factor: unknown collective {collective!r}")


def bandwidths(collective: str, size_bytes: int, seconds: float,
               nranks: int) -> tuple[float, float]:
    """bandwidths returns (algbw, busbw) in decimal GB/s (1e9 bytes/s):
    algbw = S / t, busbw = algbw * bus_factor."""
    if seconds <= 0:
        return (0.0, 0.0)
    algbw = size_bytes / seconds / 1e9
    return (algbw, algbw * bus_factor(collective, nranks))


_SUFFIX = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str) -> int:
    """parse_size reads a byte count as nccl-tests does: a whole number with an
    optional K, M or G suffix (binary multiples: 1K = 1024), "B"/"iB" allowed."""
    s = str(text).strip().upper()
    for tail in ("IB", "B"):
        if s.endswith(tail) and len(s) > len(tail):
            s = s[: -len(tail)]
            break
    suffix = s[-1:] if s[-1:] in _SUFFIX and s[-1:] else ""
    number = s[: len(s) - len(suffix)]
    try:
        value = int(number)
    except ValueError:
        raise ValueError(f"{text!r} is not a byte count (a whole number with an optional "
                         f"K, M or G suffix, e.g. 8, 64K, 32M)") from None
    if value < 0:
        raise ValueError(f"{text!r}: a byte count cannot be negative")
    return value * _SUFFIX[suffix]


def sweep_sizes(minbytes: int, maxbytes: int, stepfactor: float | None = None,
                stepbytes: int | None = None) -> list[int]:
    """sweep_sizes lists the sizes from minbytes to maxbytes, multiplying by
    stepfactor, or adding stepbytes when no factor is given (nccl-tests -f, -i)."""
    if minbytes > maxbytes:
        raise ValueError(f"minbytes {minbytes} is larger than maxbytes {maxbytes}")
    sizes, size = [], minbytes
    if stepfactor is not None:
        if stepfactor <= 1:
            raise ValueError(f"stepfactor must be larger than 1, not {stepfactor}")
        if size == 0:
            size = 1 if maxbytes else 0
            sizes.append(0)
        while size <= maxbytes and size > 0:
            sizes.append(size)
            nxt = int(size * stepfactor)
            size = nxt if nxt > size else size + 1
    else:
        step = stepbytes if stepbytes is not None else 1 << 20
        if step <= 0:
            raise ValueError(f"stepbytes must be positive, not {step}")
        while size <= maxbytes:
            sizes.append(size)
            size += step
    return sorted(set(sizes))


@dataclasses.dataclass(frozen=True)
class Layout:
    """Layout is how a sweep size maps onto one collective's buffers, in
    elements of the dtype: what each rank sends and receives, nccl-tests'
    count, and the size in bytes the row prints (and divides by time)."""
    count: int
    send_elems: int
    recv_elems: int
    size_bytes: int


def layout(collective: str, nbytes: int, element_size: int, nranks: int) -> Layout:
    """layout rounds nbytes down to whole elements and, for the collectives
    that split a buffer into one chunk per rank, to a multiple of nranks."""
    total = nbytes // element_size
    if collective in ("all_reduce", "broadcast", "reduce", "sendrecv"):
        return Layout(total, total, total, total * element_size)
    chunk = total // nranks
    if collective == "all_gather":
        return Layout(chunk, chunk, chunk * nranks, chunk * nranks * element_size)
    if collective == "reduce_scatter":
        return Layout(chunk, chunk * nranks, chunk, chunk * nranks * element_size)
    if collective == "all_to_all":
        return Layout(chunk, chunk * nranks, chunk * nranks, chunk * nranks * element_size)
    raise ValueError(f"layout: unknown collective {collective!r}")


def parse_list(text: str, allowed, what: str, aliases: dict | None = None) -> list[str]:
    """parse_list reads a comma-separated choice ("sum,max" or "all")."""
    out = []
    for part in str(text).split(","):
        name = part.strip().lower()
        if not name:
            continue
        if name == "all":
            out.extend(allowed)
            continue
        name = (aliases or {}).get(name, name)
        if name not in allowed:
            raise ValueError(f"unknown {what} {part.strip()!r}; choose from "
                             f"{', '.join(allowed)} or all")
        out.append(name)
    if not out:
        raise ValueError(f"no {what} given")
    return list(dict.fromkeys(out))


_COLLECTIVE_ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather",
                       "reducescatter": "reduce_scatter", "alltoall": "all_to_all",
                       "all2all": "all_to_all", "send_recv": "sendrecv", "bcast": "broadcast"}


def human_bytes(n: int) -> str:
    """human_bytes writes a size the way -b/-e take it: 512, 4K, 32M."""
    for suffix, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{suffix}"
    return str(n)


def format_time_us(us: float) -> str:
    if us < 1e4:
        return f"{us:.2f}"
    if us < 1e6:
        return f"{us:.1f}"
    return f"{us:.0f}"


# --------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m gohccl.bench", allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="nccl-tests style benchmark of gohccl with Gloo side by side.",
        epilog="Sizes take K/M/G suffixes (binary). Time is the largest per-rank median "
               "(or mean, --stat) over the iterations. See docs/bench.md.")
    size = p.add_argument_group("sizes (as nccl-tests)")
    size.add_argument("-b", "--minbytes", default="8", help="smallest size (default 8)")
    size.add_argument("-e", "--maxbytes", default="32M", help="largest size (default 32M)")
    size.add_argument("-f", "--stepfactor", type=float, default=None,
                      help="multiply the size by this between rows (default 2 unless -i)")
    size.add_argument("-i", "--stepbytes", default=None,
                      help="add this many bytes between rows instead of -f")
    op = p.add_argument_group("operation")
    op.add_argument("-c", "--collective", default="all_reduce",
                    help="comma list of " + ", ".join(COLLECTIVES) + ", or all (default all_reduce)")
    op.add_argument("-o", "--op", default="sum",
                    help="comma list of " + ", ".join(OPS) + ", or all (default sum)")
    op.add_argument("-d", "--dtype", default="float",
                    help="comma list of float, double, half, bfloat16, int8, uint8, int16, "
                         "int32, int64 (torch names too), or all (default float)")
    op.add_argument("-r", "--root", type=int, default=0,
                    help="root rank of broadcast and reduce (default 0)")
    perf = p.add_argument_group("timing")
    perf.add_argument("-n", "--iters", type=int, default=20, help="timed iterations (default 20)")
    perf.add_argument("-w", "--warmup", type=int, default=5,
                      help="untimed iterations before them (default 5)")
    perf.add_argument("--block", type=int, default=10,
                      help="back-to-back calls per sample, whose mean is the sample (default 10)")
    perf.add_argument("--stat", choices=("median", "mean"), default="median",
                      help="per-rank statistic of the samples (default median)")
    who = p.add_argument_group("what to compare")
    who.add_argument("--backends", default="gohccl,gloo",
                     help="comma list of gohccl, gloo, mpi (default gohccl,gloo); "
                          "mpi needs mpirun and mpi4py and is skipped otherwise")
    who.add_argument("--algo", default=None,
                     help="comma list of GOHCCL_ALGO values; one gohccl group per value "
                          "(default: one group, GOHCCL_ALGO as in the environment)")
    out = p.add_argument_group("checking and output")
    out.add_argument("--check", action="store_true",
                     help="verify every label's result once per row (column #wrong)")
    out.add_argument("--json", metavar="FILE", help="write every row and the run's settings")
    out.add_argument("--csv", metavar="FILE", help="write every row, one line per label")
    out.add_argument("--plot", metavar="FILE.png",
                     help="busbw and latency against size (needs matplotlib)")
    prog = out.add_mutually_exclusive_group()
    prog.add_argument("--progress", dest="progress", action="store_true", default=None,
                      help="progress bar on stderr (default: when stderr is a terminal)")
    prog.add_argument("--no-progress", dest="progress", action="store_false")
    run = p.add_argument_group("processes")
    run.add_argument("--nproc", type=int, default=None,
                     help="when not started by torchrun or mpirun: launch this many ranks "
                          "on this host with torchrun (default 2; 1 runs in this process)")
    run.add_argument("--timeout", type=float, default=300.0,
                     help="process group timeout in seconds (default 300)")
    return p


@dataclasses.dataclass
class Options:
    sizes: list[int]
    collectives: list[str]
    ops: list[str]
    dtypes: list[str]
    root: int
    iters: int
    warmup: int
    block: int
    stat: str
    backends: list[str]
    algos: list[str] | None
    check: bool
    json: str | None
    csv: str | None
    plot: str | None
    progress: bool | None
    nproc: int | None
    timeout: float
    minbytes: int
    maxbytes: int
    stepfactor: float | None
    stepbytes: int | None


def parse_args(argv: list[str]) -> Options:
    parser = build_parser()
    a = parser.parse_args(argv)
    try:
        minbytes, maxbytes = parse_size(a.minbytes), parse_size(a.maxbytes)
        stepbytes = parse_size(a.stepbytes) if a.stepbytes is not None else None
        if a.stepfactor is not None and stepbytes is not None:
            raise ValueError("give -f/--stepfactor or -i/--stepbytes, not both")
        stepfactor = a.stepfactor if a.stepfactor is not None or stepbytes is not None else 2.0
        sizes = sweep_sizes(minbytes, maxbytes, stepfactor, stepbytes)
        collectives = parse_list(a.collective, COLLECTIVES, "collective", _COLLECTIVE_ALIASES)
        ops = parse_list(a.op, OPS, "op", {"product": "prod", "mean": "avg"})
        dtypes = parse_list(a.dtype, DTYPES, "dtype", _DTYPE_ALIASES)
        backends = parse_list(a.backends, ("gohccl", "gloo", "mpi"), "backend")
        algos = None
        if a.algo is not None:
            algos = [s.strip() for s in a.algo.split(",") if s.strip()]
            if not algos:
                raise ValueError("--algo needs at least one GOHCCL_ALGO value")
            if "gohccl" not in backends:
                raise ValueError("--algo selects gohccl algorithms, but --backends has no gohccl")
            algos = list(dict.fromkeys(algos))
        # "-o all" skips avg on integer dtypes; asking for avg by name refuses them.
        avg_named = "avg" in [x.strip().lower() for x in str(a.op).split(",")]
        if avg_named and any(c in REDUCING for c in collectives):
            bad = [d for d in dtypes if d not in FLOAT_DTYPES]
            if bad:
                raise ValueError(f"avg is defined here for floating dtypes only, not {', '.join(bad)}")
        if a.iters < 1 or a.warmup < 0:
            raise ValueError("-n/--iters must be at least 1 and -w/--warmup at least 0")
        if a.block < 1:
            raise ValueError("--block must be at least 1")
        if a.nproc is not None and a.nproc < 1:
            raise ValueError("--nproc must be at least 1")
        if a.root < 0:
            raise ValueError("-r/--root cannot be negative")
    except ValueError as exc:
        parser.error(str(exc))
    return Options(sizes=sizes, collectives=collectives, ops=ops, dtypes=dtypes, root=a.root,
                   iters=a.iters, warmup=a.warmup, block=a.block, stat=a.stat, backends=backends,
                   algos=algos, check=a.check, json=a.json, csv=a.csv, plot=a.plot,
                   progress=a.progress, nproc=a.nproc, timeout=a.timeout,
                   minbytes=minbytes, maxbytes=maxbytes, stepfactor=stepfactor,
                   stepbytes=stepbytes)


def matplotlib_missing() -> str | None:
    """matplotlib_missing says why --plot cannot work here, or None."""
    try:
        import matplotlib  # noqa: F401 - only whether it imports
    except ImportError:
        return ("--plot needs matplotlib, which is not installed in this Python "
                f"({sys.executable}); install it (pip install matplotlib) or drop --plot")
    return None


# --------------------------------------------------------------------------
# Launching
# --------------------------------------------------------------------------

_MPI_RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK")
_MPI_SIZE_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE")


def launched_by_mpirun() -> bool:
    return any(v in os.environ for v in _MPI_RANK_VARS)


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _strip_nproc(argv: list[str]) -> list[str]:
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg == "--nproc":
            skip = True
            continue
        if arg.startswith("--nproc="):
            continue
        out.append(arg)
    return out


def _self_command() -> list[str]:
    """How torchrun should start this module again: -m when we were run as a
    module, the file path when run as a script."""
    spec = globals().get("__spec__")
    if spec is not None and spec.name and spec.name != "__main__":
        return ["-m", spec.name]
    return [os.path.abspath(__file__)]


def launch_self(nproc: int, argv: list[str]) -> int:
    """launch_self runs this command again under torchrun with nproc ranks on
    this host, waits for it and returns its exit status. torchrun starts the
    ranks with subprocess (fork + exec), never a bare fork."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nnodes", "1", "--nproc-per-node", str(nproc)] + _self_command() + _strip_nproc(argv)
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun would, minus its warning
    env.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one host: loopback for Gloo
    env.setdefault("GOHCCL_BENCH_COMMAND", shlex.join(["python", "-m", "gohccl.bench"] + argv))
    # The ranks report the verdict (0, or 1 for wrong results) through this
    # file and exit 0, so torchrun does not print a failure report for what is
    # a finding, not a crash.
    fd, status_path = tempfile.mkstemp(prefix="gohccl-bench-status-")
    os.close(fd)
    env["GOHCCL_BENCH_STATUS_FILE"] = status_path
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)

    def forward(signum, _frame):
        try:
            proc.send_signal(signum)  # torchrun tears its ranks down on SIGINT/SIGTERM
        except OSError:
            pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        rc = proc.wait()
        if rc == 0:
            with open(status_path) as f:
                verdict = f.read().strip()
            rc = int(verdict) if verdict else 0
        return rc
    finally:
        try:
            os.unlink(status_path)
        except OSError:
            pass
        for s, h in old.items():
            signal.signal(s, h)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _exit_with_parent():
    """A rank whose launcher died (torchrun killed with SIGKILL cannot reap the
    ranks it started in their own sessions) exits instead of lingering."""
    parent = os.getppid()

    def watch():
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="bench-parent-watch", daemon=True).start()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class BenchError(Exception):
    """BenchError is a failure the bench reports in one sentence and exits 2."""


class World:
    """World is this process's place in the job: rank, size, the control group
    (Gloo, used only between measurements: barriers and gathering statistics)
    and, under mpirun with mpi4py, the MPI communicator."""

    def __init__(self, timeout_s: float, want_mpi: bool):
        import torch.distributed as dist
        self.mpi_comm = None
        self.mpi_note = None
        self.launcher = "torchrun"
        timeout = datetime.timedelta(seconds=timeout_s)
        if launched_by_torchrun():
            rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
            if want_mpi:
                self.mpi_note = "mpi skipped: not launched by mpirun"
            dist.init_process_group("gloo", timeout=timeout)
        elif launched_by_mpirun():
            self.launcher = "mpirun"
            mpi = None
            try:
                from mpi4py import MPI as mpi  # noqa: N811 - MPI_Init happens here
            except ImportError:
                if want_mpi:
                    self.mpi_note = "mpi skipped: mpi4py is not installed"
            if mpi is not None:
                comm = mpi.COMM_WORLD
                rank, size = comm.Get_rank(), comm.Get_size()
                hosts = comm.allgather(socket.gethostname())
                addr = os.environ.get("MASTER_ADDR") or (
                    "127.0.0.1" if len(set(hosts)) == 1 else socket.gethostbyname(hosts[0]))
                port = comm.bcast(_free_port() if rank == 0 else None, root=0)
                if want_mpi:
                    self.mpi_comm = comm
            else:
                rank = int(next(os.environ[v] for v in _MPI_RANK_VARS if v in os.environ))
                size = int(next((os.environ[v] for v in _MPI_SIZE_VARS if v in os.environ), "0"))
                if size < 1:
                    raise SystemExit("gohccl.bench: launched by mpirun but the world size is "
                                     "not in the environment; install mpi4py")
                addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
                port = int(os.environ.get("MASTER_PORT", "29500"))
            dist.init_process_group("gloo", init_method=f"tcp://{addr}:{port}", rank=rank,
                                    world_size=size, timeout=timeout)
        else:
            self.launcher = "single process"
            rank, size = 0, 1
            if want_mpi:
                self.mpi_note = "mpi skipped: not launched by mpirun"
            dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                                    timeout=timeout)
        self.rank, self.size = rank, size
        self.control = dist.group.WORLD

    def barrier(self):
        import torch.distributed as dist
        dist.barrier(group=self.control)

    def max_over_ranks(self, values: list[float]) -> list[float]:
        import torch
        import torch.distributed as dist
        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.control)
        return t.tolist()

    def sum_over_ranks(self, values: list[int]) -> list[int]:
        import torch
        import torch.distributed as dist
        t = torch.tensor(values, dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.control)
        return [int(v) for v in t.tolist()]

    def gather_strings(self, text: str) -> list[str]:
        import torch.distributed as dist
        out = [None] * self.size
        dist.all_gather_object(out, text, group=self.control)
        return out


# --------------------------------------------------------------------------
# Labels: what runs one collective
# --------------------------------------------------------------------------

@dataclasses.dataclass
class Buffers:
    """Buffers are the tensors of one case, shared by every label. For the
    in-place collectives (all_reduce, broadcast, reduce) send is recv."""
    send: object
    recv: object
    inplace: bool


class Label:
    """Label is one column group: a name and how to run a collective with it."""

    name: str
    backend: str
    algo: str | None = None

    def unsupported(self, dtype: str, op: str | None) -> str | None:
        return None

    def run(self, collective: str, buf: Buffers, op: str | None, root: int):
        raise NotImplementedError


class TorchLabel(Label):
    """TorchLabel runs torch.distributed collectives on its own process group."""

    def __init__(self, name: str, backend: str, group, rank: int, size: int,
                 algo: str | None = None):
        import torch.distributed as dist
        self.name, self.backend, self.group, self.algo = name, backend, group, algo
        self.rank, self.size = rank, size
        self._dist = dist
        self._ops = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT,
                     "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN,
                     "avg": dist.ReduceOp.AVG}
        # torch 2.14 names the tensor forms *_single; older torch *_into_tensor/_tensor.
        self._all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        self._reduce_scatter = (getattr(dist, "reduce_scatter_single", None)
                                or dist.reduce_scatter_tensor)

    def unsupported(self, dtype, op):
        if self.backend == "gloo" and dtype == "int16":
            return "gloo has no int16 kernels"
        return None

    def run(self, collective, buf, op, root):
        d, g = self._dist, self.group
        if collective == "all_reduce":
            d.all_reduce(buf.recv, op=self._ops[op], group=g)
        elif collective == "all_gather":
            self._all_gather(buf.recv, buf.send, group=g)
        elif collective == "reduce_scatter":
            self._reduce_scatter(buf.recv, buf.send, op=self._ops[op], group=g)
        elif collective == "broadcast":
            d.broadcast(buf.recv, src=root, group=g)
        elif collective == "reduce":
            d.reduce(buf.recv, dst=root, op=self._ops[op], group=g)
        elif collective == "all_to_all":
            d.all_to_all_single(buf.recv, buf.send, group=g)
        elif collective == "sendrecv":
            # nccl-tests' pattern: send to the next rank, receive from the previous.
            nxt, prev = (self.rank + 1) % self.size, (self.rank - 1) % self.size
            send = d.isend(buf.send, nxt, group=g)
            recv = d.irecv(buf.recv, prev, group=g)
            send.wait()
            recv.wait()
        else:
            raise ValueError(collective)


class MPILabel(Label):
    """MPILabel runs the MPI collective on numpy views of the same tensors."""

    def __init__(self, comm):
        from mpi4py import MPI
        self.name, self.backend, self.comm, self.MPI = "mpi", "mpi", comm, MPI
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self._ops = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
        self._views: dict[int, object] = {}

    def unsupported(self, dtype, op):
        if dtype in ("float16", "bfloat16"):
            return f"MPI has no standard {dtype} type"
        if op == "avg":
            return "MPI has no average operator"
        return None

    def _np(self, t):
        key = id(t)
        view = self._views.get(key)
        if view is None or view[0] is not t:
            view = (t, t.numpy())
            self._views[key] = view
        return view[1]

    def run(self, collective, buf, op, root):
        comm, MPI = self.comm, self.MPI
        recv, send = self._np(buf.recv), self._np(buf.send)
        if collective == "all_reduce":
            comm.Allreduce(MPI.IN_PLACE, recv, op=self._ops[op])
        elif collective == "all_gather":
            comm.Allgather(send, recv)
        elif collective == "reduce_scatter":
            comm.Reduce_scatter_block(send, recv, op=self._ops[op])
        elif collective == "broadcast":
            comm.Bcast(recv, root=root)
        elif collective == "reduce":
            if self.rank == root:
                comm.Reduce(MPI.IN_PLACE, recv, op=self._ops[op], root=root)
            else:
                comm.Reduce(recv, None, op=self._ops[op], root=root)
        elif collective == "all_to_all":
            comm.Alltoall(send, recv)
        elif collective == "sendrecv":
            comm.Sendrecv(send, dest=(self.rank + 1) % self.size, recvbuf=recv,
                          source=(self.rank - 1) % self.size)
        else:
            raise ValueError(collective)

    def forget(self):
        self._views.clear()


def make_labels(world: World, opts: Options) -> tuple[list[Label], list[str]]:
    """make_labels creates one process group per label, in the same order on
    every rank. GOHCCL_ALGO is read when a gohccl communicator is created, so
    each --algo value gets its own group created right after setting it."""
    import torch.distributed as dist
    labels: list[Label] = []
    notes: list[str] = []
    for backend in opts.backends:
        if backend == "gohccl":
            import gohccl  # noqa: F401 - registers the backend
            algos = opts.algos or [None]
            saved = os.environ.get("GOHCCL_ALGO")
            try:
                for algo in algos:
                    if algo is not None:
                        os.environ["GOHCCL_ALGO"] = algo
                    try:
                        group = dist.new_group(backend="gohccl", timeout=datetime.timedelta(
                            seconds=opts.timeout))
                    except Exception as exc:  # noqa: BLE001 - reported in one sentence
                        what = "" if algo is None else f" with GOHCCL_ALGO={algo!r}"
                        raise BenchError(f"cannot create a gohccl group{what}: "
                                         f"{str(exc).strip().splitlines()[-1]}") from exc
                    name = "gohccl" if algo is None else f"gohccl/{algo}"
                    labels.append(TorchLabel(name, "gohccl", group, world.rank, world.size, algo))
            finally:
                if saved is None:
                    os.environ.pop("GOHCCL_ALGO", None)
                else:
                    os.environ["GOHCCL_ALGO"] = saved
        elif backend == "gloo":
            group = dist.new_group(backend="gloo",
                                   timeout=datetime.timedelta(seconds=opts.timeout))
            labels.append(TorchLabel("gloo", "gloo", group, world.rank, world.size))
        elif backend == "mpi":
            if world.mpi_comm is not None:
                labels.append(MPILabel(world.mpi_comm))
            else:
                notes.append(world.mpi_note or "mpi skipped")
    return labels, notes


# --------------------------------------------------------------------------
# --check: inputs from a closed form, expectations computed locally
# --------------------------------------------------------------------------

def pattern(rank: int, start: int, length: int, kind: str, nranks: int):
    """pattern is rank's input elements [start, start+length) as int64, from a
    closed form every rank can evaluate for every other rank. The values are
    small whole numbers, exact in every dtype, and vary with the index and the
    rank so that a misplaced chunk is caught:
      data  1..101 (collectives that move data; 0 never appears, and outputs
            start at 0, so an element nobody wrote is caught)
      sum   1..3 (also max, min, avg)
      prod  1 or 2, with at most three 2s per element across ranks, so a
            product stays at most 8
    """
    import torch
    idx = torch.arange(start, start + length, dtype=torch.int64)
    if kind == "data":
        return (idx * 7 + rank * 13) % 101 + 1
    if kind == "prod":
        return 1 + ((idx * 7 + rank * 3) % (2 * nranks) == 0).to(torch.int64)
    return 1 + (idx * 7 + rank * 3) % 3


def _pattern_kind(collective: str, op: str | None) -> str:
    if collective not in REDUCING:
        return "data"
    return "prod" if op == "prod" else "sum"


def _reduce_patterns(op: str, start: int, length: int, kind: str, nranks: int):
    """The op over every rank's pattern slice, as float64 (exact: small whole
    numbers), accumulated one rank at a time."""
    import torch
    acc = pattern(0, start, length, kind, nranks).to(torch.float64)
    for r in range(1, nranks):
        x = pattern(r, start, length, kind, nranks).to(torch.float64)
        if op in ("sum", "avg"):
            acc += x
        elif op == "prod":
            acc *= x
        elif op == "max":
            torch.maximum(acc, x, out=acc)
        elif op == "min":
            torch.minimum(acc, x, out=acc)
    if op == "avg":
        acc /= nranks
    return acc


def fill_for_check(collective: str, buf: Buffers, dtype: str, op: str | None, rank: int,
                   nranks: int):
    kind = _pattern_kind(collective, op)
    n_send = buf.send.numel()
    buf.send.copy_(pattern(rank, 0, n_send, kind, nranks).to(buf.send.dtype))
    if not buf.inplace:
        buf.recv.zero_()


def expected_result(collective: str, layout_: Layout, op: str | None, root: int, rank: int,
                    nranks: int):
    """expected_result is what this rank's recv buffer must hold after the
    collective, as float64, or None when the collective defines nothing here
    (reduce on a rank other than the root)."""
    import torch
    kind = _pattern_kind(collective, op)
    c = layout_.count
    if collective == "all_reduce":
        return _reduce_patterns(op, 0, c, kind, nranks)
    if collective == "reduce":
        return _reduce_patterns(op, 0, c, kind, nranks) if rank == root else None
    if collective == "reduce_scatter":
        return _reduce_patterns(op, rank * c, c, kind, nranks)
    if collective == "broadcast":
        return pattern(root, 0, c, kind, nranks).to(torch.float64)
    if collective == "all_gather":
        return torch.cat([pattern(r, 0, c, kind, nranks) for r in range(nranks)]).to(torch.float64)
    if collective == "all_to_all":
        return torch.cat([pattern(r, rank * c, c, kind, nranks)
                          for r in range(nranks)]).to(torch.float64)
    if collective == "sendrecv":
        return pattern((rank - 1) % nranks, 0, c, kind, nranks).to(torch.float64)
    raise ValueError(collective)


def count_wrong(got, expected, dtype: str, op: str | None, nranks: int) -> int:
    """count_wrong counts the elements of got that differ from expected.
    Integers must match exactly (expected wrapped to the dtype, as the
    hardware wraps); floats exactly too, except sum and avg, which may be off
    by (nranks+1) ulps of the result (another summation order, one rounding
    of the division)."""
    import torch
    got = got.reshape(-1)
    expected = expected.reshape(-1)
    if got.numel() != expected.numel():
        return max(got.numel(), expected.numel())
    if dtype in FLOAT_DTYPES:
        g = got.to(torch.float64)
        if op in ("sum", "avg"):
            tol = expected.abs() * (EPS[dtype] * (nranks + 1))
            ok = (g - expected).abs() <= tol
        else:
            ok = g == expected
        return int((~ok).sum())
    want = expected.to(torch.int64).to(got.dtype)
    return int((got != want).sum())


def _corrupt_targets() -> set[str]:
    """The labels GOHCCL_BENCH_CORRUPT names (test hook, see module doc)."""
    raw = os.environ.get("GOHCCL_BENCH_CORRUPT", "")
    return {part.strip() for part in raw.split(",") if part.strip()}


def verify(label: Label, collective: str, buf: Buffers, lay: Layout, dtype: str,
           op: str | None, root: int, rank: int, nranks: int) -> int:
    """verify runs one collective of label on check inputs and returns the
    number of wrong elements on this rank."""
    fill_for_check(collective, buf, dtype, op, rank, nranks)
    label.run(collective, buf, op, root)
    expected = expected_result(collective, lay, op, root, rank, nranks)
    if expected is None:
        return 0
    targets = _corrupt_targets()
    if targets and ("*" in targets or label.name in targets) and buf.recv.numel() > 0:
        flat = buf.recv.view(-1)
        flat[0] = flat[0] + 1  # test hook: a result the check must reject
    return count_wrong(buf.recv, expected, dtype, op, nranks)


# --------------------------------------------------------------------------
# Progress bar
# --------------------------------------------------------------------------

class Progress:
    """Progress draws one line on stderr: cases done, the case running, time
    left. Rows printed meanwhile go through line() so the bar never garbles them."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled = total, enabled and total > 0
        self.done, self.desc, self.start = 0, "", time.monotonic()
        self._last, self._shown = 0.0, False

    def case(self, desc: str):
        self.desc = desc
        self.draw(force=True)

    def advance(self):
        self.done += 1
        self.draw(force=True)

    def draw(self, force: bool = False, frac: float = 0.0):
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.2:
            return
        self._last = now
        done = min(self.done + frac, self.total)
        width = 24
        filled = int(width * done / self.total)
        elapsed = now - self.start
        eta = ""
        if done > 0 and done < self.total:
            eta = f" ~{elapsed * (self.total - done) / done:.0f}s left"
        sys.stderr.write(f"\r\033[K[{'#' * filled}{'.' * (width - filled)}] "
                         f"{self.done}/{self.total} {self.desc}{eta}")
        sys.stderr.flush()
        self._shown = True

    def clear(self):
        if self.enabled and self._shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self._shown = False

    def line(self, text: str):
        self.clear()
        print(text, flush=True)
        self.draw(force=True)


# --------------------------------------------------------------------------
# The sweep
# --------------------------------------------------------------------------

def _make_buffers(collective: str, lay: Layout, dtype: str) -> Buffers:
    import torch
    tdtype = getattr(torch, dtype)
    if collective in ("all_reduce", "broadcast", "reduce"):
        t = torch.zeros(lay.send_elems, dtype=tdtype)
        return Buffers(t, t, True)
    return Buffers(torch.zeros(lay.send_elems, dtype=tdtype),
                   torch.zeros(lay.recv_elems, dtype=tdtype), False)


def _fill_for_timing(buf: Buffers, op: str | None):
    # A value the op maps to itself (0 for sum/max/min/avg, 1 for prod), so
    # repeated in-place reductions never reach inf, NaN or denormals, whose
    # arithmetic could cost differently from one iteration to the next.
    buf.send.fill_(1 if op == "prod" else 0)
    if not buf.inplace:
        buf.recv.zero_()


def run_case(world: World, labels: list[Label], active: list[bool], collective: str,
             buf: Buffers, op: str | None, root: int, iters: int, warmup: int, block: int,
             progress: Progress) -> list[list[float]]:
    """run_case takes warmup+iters rounds; each round runs every active label
    in order (A B A B ...), block calls back to back each, and records the
    timed rounds' samples in seconds per call, per label.

    Each block starts with one untimed call of the same label: the first
    call after another label's absorbs the arrival skew that label left
    between the ranks (Gloo's returns hundreds of microseconds apart on this
    2-core machine), which is not this label's cost. The timed calls then
    start from this label's own exit skew, as in a loop of its calls, and
    a block of several averages the calls, as in nccl-tests' timed loops."""
    samples: list[list[float]] = [[] for _ in labels]
    clock = time.perf_counter
    total = warmup + iters
    for i in range(total):
        for k, label in enumerate(labels):
            if not active[k]:
                continue
            label.run(collective, buf, op, root)
            t0 = clock()
            for _ in range(block):
                label.run(collective, buf, op, root)
            t1 = clock()
            if i >= warmup:
                samples[k].append((t1 - t0) / block)
        progress.draw(frac=(i + 1) / total)
    return samples


@dataclasses.dataclass
class Row:
    collective: str
    size: int
    count: int
    dtype: str
    type: str
    redop: str
    root: int
    label: str
    backend: str
    algo: str | None
    time_us: float | None
    time_us_median: float | None
    time_us_mean: float | None
    time_us_min: float | None
    algbw: float | None
    busbw: float | None
    wrong: int | None
    speedup_vs_gloo: float | None
    iters: int
    warmup: int
    block: int
    nranks: int
    skipped: str | None = None


def _table_header(labels: list[Label], has_gloo: bool) -> list[str]:
    left_names = ("size", "count", "type", "redop", "root")
    left_units = ("(B)", "(elements)", "", "", "")
    left_w = (12, 12, 8, 6, 6)
    top = "#" + " " * (sum(left_w) + 2 * len(left_w) - 1)
    names = "#" + "  ".join(f"{n:>{w}}" for n, w in zip(left_names, left_w))[1:]
    units = "#" + "  ".join(f"{n:>{w}}" for n, w in zip(left_units, left_w))[1:]
    for label in labels:
        cols = [("time", "(us)", 10), ("algbw", "(GB/s)", 7), ("busbw", "(GB/s)", 7),
                ("#wrong", "", 6)]
        if has_gloo and label.backend != "gloo":
            cols.append(("speedup", "vs gloo", 7))
        width = sum(w + 2 for _, _, w in cols)
        top += f"{label.name:^{width}}"
        names += "".join(f"  {n:>{w}}" for n, _, w in cols)
        units += "".join(f"  {u:>{w}}" for _, u, w in cols)
    return [top.rstrip(), names.rstrip(), units.rstrip()]


def _table_line(rows: list[Row], labels: list[Label], has_gloo: bool) -> str:
    r0 = rows[0]
    text = (f"{r0.size:>12}  {r0.count:>12}  {r0.type:>8}  {r0.redop:>6}  {r0.root:>6}")
    for label, row in zip(labels, rows):
        if row.skipped is not None:
            cells = ["n/a", "n/a", "n/a", "n/a"]
        else:
            cells = [format_time_us(row.time_us), f"{row.algbw:.2f}", f"{row.busbw:.2f}",
                     "N/A" if row.wrong is None else str(row.wrong)]
        widths = [10, 7, 7, 6]
        if has_gloo and label.backend != "gloo":
            cells.append("n/a" if row.speedup_vs_gloo is None else f"{row.speedup_vs_gloo:.2f}x")
            widths.append(7)
        text += "".join(f"  {c:>{w}}" for c, w in zip(cells, widths))
    return text


# FIRST_WARMUP_BYTES sizes the warmup of a run's first row: at least as
# many rounds as move this many bytes per call, up to FIRST_WARMUP_ROUNDS.
# A process that has just initialised is not yet in its steady state: for
# gohccl the Go runtime's monitor thread wakes every 20 us for some
# milliseconds after the long waits of init (docs/mesh.md, "The Go
# runtime's monitor thread"), and a few warmup rounds of a 4 KiB all-reduce
# (tens of microseconds) end inside that. The count depends only on the
# size, so every rank runs the same rounds.
FIRST_WARMUP_BYTES = 1 << 20
FIRST_WARMUP_ROUNDS = 100


def warmup_rounds(opts: Options, size_bytes: int, first: bool) -> int:
    """warmup_rounds is -w, raised for the run's first row (see
    FIRST_WARMUP_BYTES)."""
    if not first:
        return opts.warmup
    return max(opts.warmup, min(FIRST_WARMUP_ROUNDS, FIRST_WARMUP_BYTES // max(size_bytes, 1)))


def measure_row(world: World, labels: list[Label], opts: Options, collective: str,
                dtype: str, op: str | None, lay: Layout, progress: Progress,
                first: bool = False) -> list[Row]:
    """measure_row is one row of the table: check (with --check), then time
    every label on the same buffers, and reduce each label's samples to the
    reported statistics, one Row per label. first marks the run's first row,
    which warms up longer (warmup_rounds)."""
    n = world.size
    root = opts.root if collective in ROOTED else -1
    buf = _make_buffers(collective, lay, dtype)
    reasons = [lb.unsupported(dtype, op) for lb in labels]
    active = [r is None for r in reasons]
    world.barrier()
    wrong_local = [0] * len(labels)
    if opts.check:
        for k, label in enumerate(labels):
            if active[k]:
                wrong_local[k] = verify(label, collective, buf, lay, dtype, op, max(root, 0),
                                        world.rank, n)
        world.barrier()
    _fill_for_timing(buf, op)
    warmup = warmup_rounds(opts, lay.size_bytes, first)
    samples = run_case(world, labels, active, collective, buf, op, max(root, 0),
                       opts.iters, warmup, opts.block, progress)
    for label in labels:
        if isinstance(label, MPILabel):
            label.forget()
    # Per rank: median, mean and minimum of each label's samples; then the
    # largest of each over the ranks.
    local = []
    for s in samples:
        local.extend([statistics.median(s), statistics.fmean(s), min(s)] if s else [0.0] * 3)
    stats = world.max_over_ranks(local)
    wrong = world.sum_over_ranks(wrong_local) if opts.check else None
    rows = []
    for k, label in enumerate(labels):
        med, mean, mn = stats[3 * k: 3 * k + 3]
        t = med if opts.stat == "median" else mean
        ran = active[k]
        algbw, busbw = bandwidths(collective, lay.size_bytes, t, n) if ran else (None, None)
        rows.append(Row(
            collective=collective, size=lay.size_bytes, count=lay.count, dtype=dtype,
            type=NCCL_TYPE_NAME[dtype], redop=op or "none", root=root, label=label.name,
            backend=label.backend, algo=label.algo,
            time_us=t * 1e6 if ran else None,
            time_us_median=med * 1e6 if ran else None,
            time_us_mean=mean * 1e6 if ran else None,
            time_us_min=mn * 1e6 if ran else None,
            algbw=algbw, busbw=busbw,
            wrong=wrong[k] if wrong is not None and ran else None,
            speedup_vs_gloo=None, iters=opts.iters, warmup=warmup, block=opts.block, nranks=n,
            skipped=reasons[k]))
    gloo = next((r for r in rows if r.backend == "gloo" and r.time_us), None)
    if gloo is not None:
        for row in rows:
            if row.backend != "gloo" and row.time_us:
                row.speedup_vs_gloo = gloo.time_us / row.time_us
    return rows


def run_sweep(world: World, labels: list[Label], opts: Options, progress: Progress,
              emit: Callable[[str], None]) -> list[Row]:
    """run_sweep prints one table per collective, one row per (dtype, op,
    size), as each row is measured, and returns every row of every label."""
    rows: list[Row] = []
    n = world.size
    has_gloo = any(lb.backend == "gloo" for lb in labels)
    for collective in opts.collectives:
        ops = opts.ops if collective in REDUCING else [None]
        if collective == "sendrecv" and n < 2:
            emit("# sendrecv skipped: it needs at least 2 ranks")
            progress.done += len(opts.dtypes) * len(opts.sizes)
            continue
        emit("#")
        emit(f"# {collective}: {', '.join(lb.name for lb in labels)} on {n} ranks, "
             f"time = max over ranks of each rank's {opts.stat} of {opts.iters} samples, "
             f"each the mean of {opts.block} calls")
        for line in _table_header(labels, has_gloo):
            emit(line)
        for dtype in opts.dtypes:
            for op in ops:
                if op == "avg" and dtype not in FLOAT_DTYPES:
                    progress.done += len(opts.sizes)  # "-o all": avg is for floats only
                    continue
                seen = set()
                for nbytes in opts.sizes:
                    lay = layout(collective, nbytes, ELEMENT_SIZE[dtype], n)
                    # Rounding to whole elements (and chunks) can empty a size
                    # or repeat the previous one: skip those.
                    if lay.count > 0 and lay.size_bytes not in seen:
                        seen.add(lay.size_bytes)
                        progress.case(" ".join(x for x in (
                            collective, dtype, op, human_bytes(lay.size_bytes)) if x))
                        row = measure_row(world, labels, opts, collective, dtype, op, lay,
                                          progress, first=not rows)
                        emit(_table_line(row, labels, has_gloo))
                        rows.extend(row)
                    progress.advance()
    return rows


# --------------------------------------------------------------------------
# Output files
# --------------------------------------------------------------------------

ROW_FIELDS = [f.name for f in dataclasses.fields(Row)]


def write_json(path: str, meta: dict, rows: list[Row]):
    doc = dict(meta)
    doc["results"] = [dataclasses.asdict(r) for r in rows]
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def write_csv(path: str, rows: list[Row]):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=ROW_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in dataclasses.asdict(r).items()})


def write_plot(path: str, rows: list[Row], nranks: int):
    """write_plot draws busbw and time against size, log axes, one line per
    label, one pair of panels per (collective, dtype, redop)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter
    groups: dict[tuple, dict[str, list[Row]]] = {}
    for r in rows:
        if r.time_us is None:
            continue
        groups.setdefault((r.collective, r.type, r.redop), {}).setdefault(r.label, []).append(r)
    if not groups:
        raise SystemExit("gohccl.bench: nothing to plot")
    fig, axes = plt.subplots(len(groups), 2, figsize=(11, 4 * len(groups)), squeeze=False)
    for (collective, type_, redop), by_label in zip(groups, groups.values()):
        i = list(groups).index((collective, type_, redop))
        bw_ax, t_ax = axes[i]
        for name, series in by_label.items():
            series = sorted(series, key=lambda r: r.size)
            x = [r.size for r in series]
            bw_ax.plot(x, [max(r.busbw, 1e-6) for r in series], marker="o", ms=3, label=name)
            t_ax.plot(x, [r.time_us for r in series], marker="o", ms=3, label=name)
        what = collective + ("" if redop == "none" else f" {redop}") + f" {type_}, {nranks} ranks"
        bw_ax.set(yscale="log", ylabel="busbw (GB/s)", title=f"bus bandwidth: {what}")
        t_ax.set(yscale="log", ylabel="time (us)", title=f"latency: {what}")
        for ax in (bw_ax, t_ax):
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: human_bytes(int(round(v)))))
            ax.set_xlabel("size (bytes)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------
# Entry point
# --------------------------------------------------------------------------

def _versions(opts: Options) -> dict:
    import torch
    out = {"torch": torch.__version__}
    if "gohccl" in opts.backends:
        import gohccl
        out["gohccl"] = gohccl.__version__
    return out


def run_rank(opts: Options, argv: list[str]) -> int:
    """run_rank is the body of every rank: set up the groups, sweep, report."""
    import warnings
    warnings.filterwarnings("ignore", category=FutureWarning)
    if launched_by_torchrun() or launched_by_mpirun():
        _exit_with_parent()
    if os.environ.get("RANK", "0") == "0" and opts.plot and matplotlib_missing():
        print(f"gohccl.bench: {matplotlib_missing()}", file=sys.stderr)
        return 2
    world = World(opts.timeout, "mpi" in opts.backends)
    import torch.distributed as dist
    try:
        return _run_world(world, opts, argv)
    except BenchError as exc:
        print(f"gohccl.bench: rank {world.rank}: {exc}", file=sys.stderr, flush=True)
        return 2
    finally:
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001 - tearing down after an error
            pass


def _run_world(world: World, opts: Options, argv: list[str]) -> int:
    """_run_world creates the labels' groups, runs the sweep on every rank and,
    on rank 0, prints the summary and writes the files."""
    if opts.root >= world.size and any(c in ROOTED for c in opts.collectives):
        if world.rank == 0:
            print(f"gohccl.bench: root {opts.root} is not a rank of a {world.size}-rank "
                  f"job", file=sys.stderr)
        return 2
    labels, notes = make_labels(world, opts)
    hosts = world.gather_strings(f"{socket.gethostname()} pid {os.getpid()}")
    lead = world.rank == 0
    if not labels:
        if lead:
            print("gohccl.bench: nothing to measure: " + "; ".join(notes), file=sys.stderr)
        return 2
    load_start = os.getloadavg()
    enabled = opts.progress if opts.progress is not None else sys.stderr.isatty()
    total = sum(len(opts.dtypes) * (len(opts.ops) if c in REDUCING else 1) * len(opts.sizes)
                for c in opts.collectives)
    progress = Progress(total, enabled and lead)

    def emit(line: str):
        if lead:
            progress.line(line)

    command = os.environ.get("GOHCCL_BENCH_COMMAND") or shlex.join(
        ["python", "-m", "gohccl.bench"] + argv)
    step = (f"{opts.stepfactor:g}(factor)" if opts.stepbytes is None
            else f"{opts.stepbytes}(bytes)")
    emit(f"# gohccl.bench  minBytes {opts.minbytes} maxBytes {opts.maxbytes} step: {step} "
         f"warmup iters: {opts.warmup} iters: {opts.iters} validation: {int(opts.check)} "
         f"stat: {opts.stat}")
    emit(f"# {world.size} ranks ({world.launcher}), labels: "
         f"{', '.join(lb.name for lb in labels)}, interleaved A B A B per iteration, {opts.block} calls each")
    emit(f"# load average {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f} "
         f"on {os.cpu_count()} CPUs")
    for note in notes:
        emit(f"# {note}")
    for r, h in enumerate(hosts):
        emit(f"#  Rank {r:3d} {h}")
    rows = run_sweep(world, labels, opts, progress, emit)
    progress.clear()
    load_end = os.getloadavg()
    if lead:
        measured = [r for r in rows if r.busbw is not None]
        avg = []
        for label in labels:
            mine = [r.busbw for r in measured if r.label == label.name]
            if mine:
                avg.append(f"{label.name} {statistics.fmean(mine):.3f}")
        print("#")
        print(f"# Avg bus bandwidth    : {', '.join(avg)} GB/s")
        if opts.check:
            bad = sum(r.wrong or 0 for r in rows)
            print(f"# Wrong elements       : {bad} {'OK' if bad == 0 else 'FAILED'}")
        else:
            print("# Wrong elements       : not checked (use --check)")
        print("#", flush=True)
        meta = {
            "tool": "gohccl.bench", "format": 1, "command": command,
            "nranks": world.size, "launcher": world.launcher, "hosts": hosts,
            "labels": [lb.name for lb in labels], "notes": notes,
            "stat": opts.stat,
            "time": f"max over ranks of each rank's {opts.stat} per-call wall time (us)",
            "algbw": "size / time, decimal GB/s", "busbw": "algbw * bus factor (nccl-tests)",
            "iters": opts.iters, "warmup": opts.warmup, "block": opts.block, "check": opts.check,
            "minbytes": opts.minbytes, "maxbytes": opts.maxbytes,
            "stepfactor": opts.stepfactor if opts.stepbytes is None else None,
            "stepbytes": opts.stepbytes, "root": opts.root,
            "load_average_start": list(load_start), "load_average_end": list(load_end),
            "cpus": os.cpu_count(), "versions": _versions(opts),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        }
        if opts.json:
            write_json(opts.json, meta, rows)
        if opts.csv:
            write_csv(opts.csv, rows)
        if opts.plot:
            write_plot(opts.plot, rows, world.size)
    world.barrier()
    status = 1 if lead and opts.check and any(r.wrong for r in rows) else 0
    status_file = os.environ.get("GOHCCL_BENCH_STATUS_FILE")
    if status_file:
        if lead:
            with open(status_file, "w") as f:
                f.write(f"{status}\n")
        return 0
    return status


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    opts = parse_args(argv)
    if launched_by_torchrun() or launched_by_mpirun():
        if opts.nproc is not None and launched_by_torchrun() and \
                opts.nproc != int(os.environ["WORLD_SIZE"]):
            print(f"gohccl.bench: --nproc {opts.nproc} given, but the launcher started "
                  f"{os.environ['WORLD_SIZE']} ranks", file=sys.stderr)
            return 2
        return run_rank(opts, argv)
    if opts.plot and matplotlib_missing():
        print(f"gohccl.bench: {matplotlib_missing()}", file=sys.stderr)
        return 2
    nproc = opts.nproc if opts.nproc is not None else 2
    if nproc == 1:
        return run_rank(opts, argv)
    return launch_self(nproc, argv)


def _exit_now(rc: int):
    """The command leaves without the interpreter's teardown, after flushing
    what it wrote and finalizing MPI if it was started: torch's and the Go
    runtime's exit work costs seconds on every rank, only delays the launcher,
    and a process that loaded libgohccl is safest not running Go's threads
    through Python's finalization."""
    sys.stdout.flush()
    sys.stderr.flush()
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized():
        mpi.Finalize()
    os._exit(rc)


if __name__ == "__main__":
    _exit_now(main())
