"""gohccl.bench.launch: how the bench's processes come to be and meet: under
torchrun, under mpirun, or launched by the command itself under torchrun
(--nproc). World is a process's place in the job and the Gloo control group
used between measurements. The launcher only ever starts fresh interpreters
(subprocess, exec): the Go runtime inside gohccl does not survive fork()."""

from __future__ import annotations

import datetime
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time


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
    """How torchrun should start this command again: -m gohccl.bench when the
    package was imported as gohccl.bench, else the package's folder, which
    Python runs through its __main__.py (as `python path/to/gohccl/bench`)."""
    if __package__ == "gohccl.bench":
        return ["-m", __package__]
    return [os.path.dirname(os.path.abspath(__file__))]


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


def exit_with_parent():
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



def exit_now(rc: int):
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

