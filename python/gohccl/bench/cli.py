"""gohccl.bench.cli: the command: its options (build_parser, parse_args), and
main, which either launches the ranks (launch) or is one of them (run_rank:
create the labels' groups, sweep, print the summary, write the files)."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import shlex
import socket
import statistics
import sys

from .defs import (COLLECTIVE_ALIASES, COLLECTIVES, DTYPE_ALIASES, DTYPES, FLOAT_DTYPES, OPS,
                   REDUCING, ROOTED, parse_list, parse_size, sweep_sizes)
from .launch import (BenchError, World, exit_with_parent, launch_self, launched_by_mpirun,
                     launched_by_torchrun)
from .report import Progress, write_csv, write_json, write_plot
from .timing import ComputeLoad, make_labels, run_sweep


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
    busy = p.add_argument_group(
        "contention (docs/bench.md: a busy machine; more ranks than cores is just --nproc)")
    busy.add_argument("--compute-threads", type=int, default=0, metavar="N",
                      help="N threads per rank multiply float32 matrices in a loop for the "
                           "whole sweep, as backward's compute would (default 0: none)")
    busy.add_argument("--compute-size", type=int, default=1024, metavar="M",
                      help="the compute threads' matrices are M x M (default 1024)")
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
    compute_threads: int
    compute_size: int
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
        collectives = parse_list(a.collective, COLLECTIVES, "collective", COLLECTIVE_ALIASES)
        ops = parse_list(a.op, OPS, "op", {"product": "prod", "mean": "avg"})
        dtypes = parse_list(a.dtype, DTYPES, "dtype", DTYPE_ALIASES)
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
        if a.compute_threads < 0:
            raise ValueError("--compute-threads cannot be negative")
        if a.compute_size < 1:
            raise ValueError("--compute-size must be at least 1")
    except ValueError as exc:
        parser.error(str(exc))
    return Options(sizes=sizes, collectives=collectives, ops=ops, dtypes=dtypes, root=a.root,
                   iters=a.iters, warmup=a.warmup, block=a.block, stat=a.stat, backends=backends,
                   algos=algos, check=a.check, json=a.json, csv=a.csv, plot=a.plot,
                   progress=a.progress, nproc=a.nproc, timeout=a.timeout,
                   compute_threads=a.compute_threads, compute_size=a.compute_size,
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
        exit_with_parent()
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


def _usable_cpus() -> int:
    """The CPUs this process may run on (its affinity), else the host's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


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
    cpus = _usable_cpus()
    busy = world.size * (1 + opts.compute_threads)
    if opts.compute_threads:
        emit(f"# contention: {opts.compute_threads} compute thread(s) per rank multiplying "
             f"{opts.compute_size}x{opts.compute_size} float32 matrices for the whole sweep")
    if busy > cpus:
        emit(f"# oversubscribed: {world.size} ranks x {1 + opts.compute_threads} busy "
             f"thread(s) = {busy} on {cpus} usable CPUs (this host's share)")
    load = ComputeLoad(opts.compute_threads, opts.compute_size) if opts.compute_threads else None
    if load is not None:
        load.start()
    try:
        rows = run_sweep(world, labels, opts, progress, emit)
    finally:
        gflops = load.stop() if load is not None else None
    progress.clear()
    load_end = os.getloadavg()
    compute = None
    if load is not None:
        compute = [float(x) for x in world.gather_strings(repr(gflops))]
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
        if compute is not None:
            print(f"# Compute kept up      : {statistics.fmean(compute):.2f} GFLOP/s per rank "
                  f"(min {min(compute):.2f}, {opts.compute_threads} thread(s) each)")
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
            "cpus": os.cpu_count(), "cpus_usable": cpus,
            "compute_threads": opts.compute_threads,
            "compute_size": opts.compute_size if opts.compute_threads else None,
            "compute_gflops": compute, "versions": _versions(opts),
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
