"""gohccl.bench.timing: the labels (what runs one collective: a torch process
group, or MPI) and the sweep that times them. Labels are interleaved within
one job, A B A B, one sample (block) of each per round, on the same tensors;
each row is checked first (with --check), then timed, then reduced to the
statistics the report prints."""

from __future__ import annotations

import dataclasses
import datetime
import os
import statistics
import threading
import time
from typing import TYPE_CHECKING, Callable

from .check import verify
from .defs import (ELEMENT_SIZE, FLOAT_DTYPES, NCCL_TYPE_NAME, REDUCING, ROOTED, Layout,
                   bandwidths, human_bytes, layout)
from .launch import BenchError, World
from .report import Progress, Row, table_header, table_line

if TYPE_CHECKING:
    from .cli import Options


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

    def settling(self, collective: str, size_bytes: int) -> int:
        """settling is how many of the label's next calls at this size are
        still its tuner's trial (gohccl measuring its choices), not the
        steady state a timed call should see."""
        return 0


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

    def settling(self, collective, size_bytes):
        if self.backend != "gohccl":
            return 0
        import torch
        from .. import _lib
        handle = self.group._get_backend(torch.device("cpu")).comm
        name = collective.replace("_", "")
        return sum(t["Left"] for t in _lib.comm_info(handle).get("Trials") or []
                   if t["Coll"] == name and t["Low"] <= size_bytes < t["High"])

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



def make_buffers(collective: str, lay: Layout, dtype: str) -> Buffers:
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
             progress: Progress, size_bytes: int = 0) -> list[list[float]]:
    """run_case takes warmup+iters rounds; each round runs every active label
    in order (A B A B ...), block calls back to back each, and records the
    timed rounds' samples in seconds per call, per label.

    Each block starts with one untimed call of the same label: the first
    call after another label's absorbs the arrival skew that label left
    between the ranks (Gloo's returns hundreds of microseconds apart on this
    2-core machine), which is not this label's cost. The timed calls then
    start from this label's own exit skew, as in a loop of its calls, and
    a block of several averages the calls, as in nccl-tests' timed loops.

    First, a label whose tuner is still measuring its choices at
    size_bytes (Label.settling) runs untimed calls until it is done, each
    label alone: the trial's calls run every candidate row, slower ones
    too, and are not what the label's steady state costs; and another
    label's calls between them would disturb what the trial measures, as
    no other job's would in a user's stream. Every rank's trial ends
    after the same call, so the ranks run the same calls."""
    samples: list[list[float]] = [[] for _ in labels]
    clock = time.perf_counter
    total = warmup + iters
    settle(labels, active, collective, buf, op, root, size_bytes)
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


# SETTLE_CALLS bounds the calls settle adds for one label: a trial runs at
# most 7 candidates x 3 passes x 16 calls (goimpl/tune/trial.go).
SETTLE_CALLS = 400


def settle(labels: list[Label], active: list[bool], collective: str, buf: Buffers,
           op: str | None, root: int, size_bytes: int):
    """settle runs each active label until its trial at size_bytes ended:
    one call, then the calls the trial has left back to back (asking
    between them would put the asking into the times the trial measures)."""
    for k, label in enumerate(labels):
        if not active[k]:
            continue
        # A class's trial starts at its first call.
        label.run(collective, buf, op, root)
        calls = 1
        while calls < SETTLE_CALLS:
            left = min(label.settling(collective, size_bytes), SETTLE_CALLS - calls)
            if left <= 0:
                break
            for _ in range(left):
                label.run(collective, buf, op, root)
            calls += left


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
    buf = make_buffers(collective, lay, dtype)
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
                       opts.iters, warmup, opts.block, progress, lay.size_bytes)
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
        for line in table_header(labels, has_gloo):
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
                        emit(table_line(row, labels, has_gloo))
                        rows.extend(row)
                    progress.advance()
    return rows


class ComputeLoad:
    """ComputeLoad is --compute-threads: threads of this rank that multiply two
    M x M float32 matrices into a third, over and over, from start() to stop(),
    as backward's compute keeps a training job's cores busy while DDP's
    gradient all-reduces run. torch releases the GIL inside the multiply, so
    the threads compete with the rank's communication for cores, not for the
    interpreter. Each multiply uses torch's intra-op threads
    (torch.get_num_threads(): 1 under the --nproc launcher, which sets
    OMP_NUM_THREADS=1)."""

    def __init__(self, threads: int, size: int):
        self.threads, self.size = threads, size
        self._stop = threading.Event()
        self._workers: list[threading.Thread] = []
        self._counts = [0] * threads
        self._t0 = 0.0

    def start(self):
        import torch
        self._stop.clear()
        self._counts = [0] * self.threads
        self._t0 = time.perf_counter()
        for i in range(self.threads):
            a, b = torch.rand(self.size, self.size), torch.rand(self.size, self.size)
            c = torch.empty(self.size, self.size)
            w = threading.Thread(target=self._loop, args=(i, a, b, c),
                                 name=f"bench-compute-{i}", daemon=True)
            w.start()
            self._workers.append(w)

    def _loop(self, i: int, a, b, c):
        import torch
        n = 0
        while not self._stop.is_set():
            torch.mm(a, b, out=c)
            n += 1
            self._counts[i] = n

    def stop(self) -> float:
        """stop ends the threads (each finishes its multiply) and returns the
        rate they kept up over the run, in GFLOP/s for this rank (2 M^3
        floating-point operations per multiply)."""
        self._stop.set()
        for w in self._workers:
            w.join()
        self._workers = []
        elapsed = time.perf_counter() - self._t0
        return sum(self._counts) * 2.0 * self.size ** 3 / elapsed / 1e9 if elapsed > 0 else 0.0
