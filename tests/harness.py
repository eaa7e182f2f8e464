"""Multi-process harness for the gohccl end-to-end tests.

A test hands `launch` a module-level worker function and a world size. The
harness starts one fresh Python interpreter per rank with subprocess (never
fork: the Go runtime inside the backend hangs in a forked child), each of
which imports gohccl when the backend is "gohccl", joins a process group
through a FileStore (or a TCP init_method) and calls the worker as
`fn(ctx, *args)`. What the worker returns is pickled into a file and handed
back to the parent as one value per rank.

Nothing may hang. The parent waits with a deadline; when a rank fails, the
others get a short grace period and are then killed. Before killing a rank
the harness asks it (SIGUSR1, faulthandler) to dump every thread's Python
stack, so the failure report shows where each rank was, next to its
traceback and the tail of its output.

Terms used below:
  case     one collective call with one dtype/op/shape, named by a string key.
  sweep    one launch that runs many cases and returns a dict key -> result;
           tests then assert on the cached results one case at a time.
  packed   a tensor as it travels back to the parent (`Packed`): dtype name,
           shape, raw elements (bfloat16 as its uint16 bit patterns) and a
           SHA-256 of the bytes, so ranks can be compared bitwise without
           shipping every large result from every rank.

Inputs are generated from (seed, rank, key) with numpy (`gen_values`), so the
parent can regenerate every rank's input and compute the reference on its own
with numpy; the backend under test never produces its own reference.
"""

from __future__ import annotations

import dataclasses
import datetime
import faulthandler
import hashlib
import importlib
import importlib.util
import inspect
import math
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable

import numpy as np

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS_DIR)


def _parse_backends(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    return names or ["gohccl"]


# BACKENDS is the list of torch.distributed backends every test runs against:
# GOHCCL_TEST_BACKENDS, comma separated ("gloo", "gohccl,gloo"); default gohccl.
BACKENDS = _parse_backends(os.environ.get("GOHCCL_TEST_BACKENDS", "gohccl"))

# WORLD_SIZES is every world size the collective sweeps cover.
WORLD_SIZES = [1, 2, 3, 4]

# DTYPES: libgohccl's element types, from the package's one Python list
# (python/gohccl/dtypes.py, read as a file: importing the gohccl package would
# load libgohccl into every process that imports this module).
_dtypes_spec = importlib.util.spec_from_file_location(
    "_gohccl_dtypes", os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                   "python", "gohccl", "dtypes.py"))
_gohccl_dtypes = importlib.util.module_from_spec(_dtypes_spec)
_dtypes_spec.loader.exec_module(_gohccl_dtypes)
DTYPES = list(_gohccl_dtypes.ELEMENT_TYPES)
FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
INT_DTYPES = ("int8", "uint8", "int16", "int32", "int64")

# EPS is the distance from 1.0 to the next representable value of each float
# dtype (2**-mantissa_bits); the float tolerances below are multiples of it.
EPS = {"float32": 2.0**-23, "float64": 2.0**-52, "float16": 2.0**-10, "bfloat16": 2.0**-7}

# The numpy dtype that holds a packed tensor's elements; bfloat16 travels as
# its raw 16-bit patterns because numpy has no bfloat16.
NP_STORAGE = {
    "float32": np.float32, "float64": np.float64, "float16": np.float16,
    "bfloat16": np.uint16, "int8": np.int8, "uint8": np.uint8,
    "int16": np.int16, "int32": np.int32, "int64": np.int64, "bool": np.bool_,
}


# --------------------------------------------------------------------------
# Which cases gloo cannot run. gohccl must run all of them; gloo is only the
# yardstick that proves the tests and their references right.
# --------------------------------------------------------------------------

def skip_reason(backend: str, *, dtype: str | None = None, op: str | None = None,
                feature: str | None = None) -> str | None:
    """skip_reason says why `backend` cannot run a case, or None if it can."""
    if backend != "gloo":
        return None
    if dtype == "int16":
        return "gloo has no int16 kernels (ProcessGroupGloo: 'Invalid scalar type')"
    if op == "PREMUL_SUM":
        return "gloo does not implement ReduceOp.PREMUL_SUM"
    if op == "AVG" and dtype is not None and dtype not in FLOAT_DTYPES:
        return ("gloo computes AVG as a float division and cannot cast the result "
                "back to an integer/bool tensor")
    if feature == "stacked_allgather":
        return ("gloo's all_gather_into_tensor accepts only the concatenated "
                "(world*n, ...) output, not the stacked (world, n, ...) one")
    if feature == "uneven_all_to_all_list":
        return ("gloo's all_to_all (list form) requires every input and output "
                "tensor to have the same size")
    if feature == "completion_order":
        return ("gloo runs async ops on a pool of worker threads, so futures "
                "of ops in flight may complete out of issue order")
    if feature == "p2p_peer_out_of_range":
        return ("gloo does not bounds-check the peer rank of isend/irecv: the "
                "process dies with SIGSEGV")
    if feature == "mismatch_detection":
        return ("gloo does not check that ranks issued the same collective: "
                "mismatched ops hang, crash or mix data")
    if feature == "strided_slice":
        return ("gloo reduces the first numel() elements of the storage of a strided, "
                "non-dense view (e.g. x[:, ::2]) and silently returns wrong values")
    if feature == "timeout_names_op":
        return ("gloo's timeout message names the transport read, not the "
                "collective")
    return None


def backend_skips(backend: str, **kw) -> bool:
    return skip_reason(backend, **kw) is not None


# --------------------------------------------------------------------------
# Deterministic inputs and packed results
# --------------------------------------------------------------------------

def gen_values(seed: int, rank: int, dtype: str, shape, kind: str = "any",
               key: int = 0) -> np.ndarray:
    """gen_values returns the numpy input of `rank` for a case.

    The same (seed, rank, dtype, shape, kind, key) gives the same array in
    every process. Float values are chosen so that they are exact in their
    dtype (float16/bfloat16 get multiples of 1/64 below 4, which both
    represent exactly); kind selects a value range:
      any      full integer range (sums and products wrap), normal floats
      small    integers small enough that the sum over 4 ranks cannot wrap
      product  values near 1 (floats) or in [-5, 5] (integers)
    """
    shape = tuple(int(s) for s in shape)
    n = math.prod(shape)
    rng = np.random.default_rng([seed, rank, key, DTYPES.index(dtype), n, len(kind)])
    if dtype == "bool":
        values = rng.integers(0, 2, n).astype(np.bool_)
    elif dtype in FLOAT_DTYPES:
        if kind == "product":
            values = rng.integers(40, 100, n) / 64.0
        elif dtype in ("float32", "float64"):
            values = rng.standard_normal(n)
        else:
            values = rng.integers(-255, 256, n) / 64.0
        values = values.astype(np.float32 if dtype == "bfloat16" else NP_STORAGE[dtype])
    else:
        storage = NP_STORAGE[dtype]
        info = np.iinfo(storage)
        if kind == "small":
            lo, hi = (0, 60) if info.min == 0 else (-30, 30)
        elif kind == "product":
            lo, hi = (0, 5) if info.min == 0 else (-5, 5)
        else:
            lo, hi = int(info.min), int(info.max)
        values = rng.integers(lo, hi, n, endpoint=True, dtype=storage)
    return values.reshape(shape)


def make_tensor(values: np.ndarray, dtype: str):
    """make_tensor turns gen_values output into a fresh torch tensor of dtype."""
    import torch
    t = torch.from_numpy(np.array(values, order="C", copy=True))
    return t.to(getattr(torch, dtype))


def gen_tensor(seed, rank, dtype, shape, kind="any", key=0):
    return make_tensor(gen_values(seed, rank, dtype, shape, kind, key), dtype)


def fill_garbage(t, salt: int = 0):
    """fill_garbage overwrites an output buffer with a recognisable pattern,
    so a backend that leaves part of it unwritten fails the comparison."""
    import torch
    n = t.numel()
    if n == 0:
        return t
    vals = gen_values(987654 + salt, 0, _dtype_name(t.dtype), (n,), "any", 77)
    t.copy_(make_tensor(vals, _dtype_name(t.dtype)).reshape(t.shape))
    return t


def _dtype_name(torch_dtype) -> str:
    return str(torch_dtype).replace("torch.", "")


@dataclasses.dataclass
class Packed:
    """Packed is a tensor on its way back to the parent."""
    dtype: str
    shape: tuple
    sha: str
    data: np.ndarray | None  # None when dropped to keep the transfer small

    def __repr__(self):
        return f"Packed({self.dtype}, shape={self.shape}, sha={self.sha[:12]})"


# Results bigger than this travel only from rank 0; other ranks send a digest.
_KEEP_ELEMENTS = 8192


def pack(t, keep: bool = True) -> Packed:
    """pack copies a tensor's elements into a Packed (see module doc)."""
    import torch
    t = t.detach()
    dtype = _dtype_name(t.dtype)
    if t.device.type != "cpu":
        raise ValueError(f"pack: tensor on {t.device}")
    c = t.contiguous()
    if dtype == "bfloat16":
        arr = c.view(torch.int16).numpy().view(np.uint16).copy()
    else:
        arr = c.numpy().copy()
    sha = hashlib.sha256(arr.tobytes()).hexdigest()
    if not keep and arr.size > _KEEP_ELEMENTS:
        arr = None
    return Packed(dtype, tuple(t.shape), sha, arr)


def values_of(p: Packed) -> np.ndarray:
    """values_of returns a Packed's elements as float64, int64 or bool."""
    assert p.data is not None, f"{p}: data was not kept"
    if p.dtype == "bfloat16":
        return (p.data.astype(np.uint32) << 16).view(np.float32).astype(np.float64).reshape(p.shape)
    if p.dtype in FLOAT_DTYPES:
        return p.data.astype(np.float64).reshape(p.shape)
    if p.dtype == "bool":
        return p.data.reshape(p.shape)
    return p.data.reshape(p.shape)


def bits_of_values(values: np.ndarray, dtype: str) -> np.ndarray:
    """bits_of_values gives the storage array that a tensor of dtype holding
    exactly `values` packs into (values must be representable in dtype)."""
    if dtype == "bfloat16":
        f = np.asarray(values, dtype=np.float32)
        u = f.view(np.uint32)
        assert not np.any(u & 0xFFFF), "value not representable in bfloat16"
        return (u >> 16).astype(np.uint16)
    return np.asarray(values).astype(NP_STORAGE[dtype])


# --------------------------------------------------------------------------
# Assertions the parent makes
# --------------------------------------------------------------------------

class CaseError(AssertionError):
    pass


def result_or_fail(res, what: str):
    """result_or_fail unwraps a per-case result recorded with `attempt`."""
    if isinstance(res, dict) and "__error__" in res:
        raise CaseError(f"{what}: raised {res['__error__']}")
    return res


def assert_same_on_all_ranks(packs: list[Packed], what: str):
    """Every rank's result must be bitwise identical."""
    first = packs[0]
    for rank, p in enumerate(packs):
        if (p.dtype, p.shape, p.sha) != (first.dtype, first.shape, first.sha):
            detail = ""
            if p.data is not None and first.data is not None and p.shape == first.shape:
                diff = np.flatnonzero(p.data.reshape(-1) != first.data.reshape(-1))
                detail = f"; first differing flat index {diff[:5].tolist()}"
            raise CaseError(
                f"{what}: rank {rank} result differs bitwise from rank 0 "
                f"({p.dtype}{list(p.shape)} vs {first.dtype}{list(first.shape)}){detail}")


def assert_equal_exact(p: Packed, expected_bits: np.ndarray, what: str):
    """The result's storage must equal expected_bits exactly (same dtype)."""
    exp = np.asarray(expected_bits)
    if p.shape != tuple(exp.shape):
        raise CaseError(f"{what}: shape {list(p.shape)}, expected {list(exp.shape)}")
    got = p.data.reshape(p.shape)
    if got.dtype != exp.dtype:
        raise CaseError(f"{what}: storage dtype {got.dtype}, expected {exp.dtype}")
    bad = np.flatnonzero(got.reshape(-1) != exp.reshape(-1))
    if bad.size:
        i = bad[:5]
        raise CaseError(
            f"{what}: {bad.size} of {exp.size} elements wrong; at flat index "
            f"{i.tolist()} got {got.reshape(-1)[i].tolist()} expected {exp.reshape(-1)[i].tolist()}")


def assert_close(p: Packed, ref: np.ndarray, tol, what: str):
    """The result must be within tol (scalar or per element) of ref."""
    ref = np.asarray(ref, dtype=np.float64)
    if p.shape != tuple(ref.shape):
        raise CaseError(f"{what}: shape {list(p.shape)}, expected {list(ref.shape)}")
    got = values_of(p)
    tol = np.broadcast_to(np.asarray(tol, dtype=np.float64), ref.shape)
    err = np.abs(got - ref)
    bad = np.flatnonzero(~(err <= tol).reshape(-1))
    if bad.size:
        i = bad[:5]
        raise CaseError(
            f"{what}: {bad.size} of {ref.size} elements outside tolerance; at flat "
            f"index {i.tolist()} got {got.reshape(-1)[i].tolist()} expected "
            f"{ref.reshape(-1)[i].tolist()} (tol {tol.reshape(-1)[i].tolist()})")


def check_dtype_shape(p: Packed, dtype: str, shape, what: str):
    if p.dtype != dtype or tuple(p.shape) != tuple(shape):
        raise CaseError(f"{what}: got {p.dtype}{list(p.shape)}, expected {dtype}{list(shape)}")


# --------------------------------------------------------------------------
# Numpy references for reductions
# --------------------------------------------------------------------------

def reduce_reference(inputs: list[np.ndarray], dtype: str, op: str, world: int,
                     factor: float = 1.0):
    """reduce_reference returns (kind, expected, tol) for reducing the ranks'
    inputs with op; kind is "exact" (expected is the storage array) or "close"
    (expected is float64 values, tol the allowed absolute error).

    Float tolerances: a sum of n terms rounded after each pairwise step is off
    by at most (n-1)*eps/2*sum|x| plus one final rounding; we allow n*eps*sum|x|,
    which also covers accumulating in a wider type and rounding once."""
    stack = np.stack(inputs) if inputs else None
    if dtype == "bool":
        table = {
            "SUM": np.logical_or.reduce, "MAX": np.logical_or.reduce, "BOR": np.logical_or.reduce,
            "PRODUCT": np.logical_and.reduce, "MIN": np.logical_and.reduce,
            "BAND": np.logical_and.reduce, "BXOR": np.logical_xor.reduce,
        }
        return "exact", table[op](stack, axis=0).astype(np.bool_), None
    if dtype in INT_DTYPES:
        storage = NP_STORAGE[dtype]
        if op == "SUM":
            out = np.add.reduce(stack, axis=0, dtype=storage)
        elif op == "PRODUCT":
            out = np.multiply.reduce(stack, axis=0, dtype=storage)
        elif op == "MIN":
            out = np.min(stack, axis=0)
        elif op == "MAX":
            out = np.max(stack, axis=0)
        elif op == "BAND":
            out = np.bitwise_and.reduce(stack, axis=0)
        elif op == "BOR":
            out = np.bitwise_or.reduce(stack, axis=0)
        elif op == "BXOR":
            out = np.bitwise_xor.reduce(stack, axis=0)
        elif op == "AVG":
            # Inputs are "small", so the sum cannot wrap; divide truncating toward zero.
            s = np.add.reduce(stack.astype(np.int64), axis=0)
            out = np.sign(s) * (np.abs(s) // world)
        else:
            raise ValueError(op)
        return "exact", np.asarray(out).astype(storage), None
    eps = EPS[dtype]
    x = stack.astype(np.float64)  # bfloat16 inputs are exact float32 values
    if op in ("MIN", "MAX"):
        ref = np.min(x, axis=0) if op == "MIN" else np.max(x, axis=0)
        return "exact", bits_of_values(ref.astype(np.float32 if dtype == "bfloat16" else NP_STORAGE[dtype]), dtype), None
    sum_abs = np.sum(np.abs(x), axis=0)
    tiny = 4 * _smallest_normal(dtype)
    if op == "SUM":
        return "close", np.sum(x, axis=0), world * eps * sum_abs + tiny
    if op == "AVG":
        ref = np.sum(x, axis=0) / world
        return "close", ref, (world + 2) * eps * sum_abs / world + tiny
    if op == "PREMUL_SUM":
        ref = np.sum(x * factor, axis=0)
        return "close", ref, (world + 1) * eps * abs(factor) * sum_abs + tiny
    if op == "PRODUCT":
        ref = np.prod(x, axis=0)
        return "close", ref, 2 * world * eps * np.abs(ref) + tiny
    raise ValueError(op)


def _smallest_normal(dtype: str) -> float:
    return {"float32": 2.0**-126, "float64": 2.0**-1022, "float16": 2.0**-14,
            "bfloat16": 2.0**-126}[dtype]


def check_reduction(p: Packed, inputs, dtype, op, world, what, factor=1.0):
    """check_reduction asserts one reduced result against the numpy reference."""
    kind, expected, tol = reduce_reference(inputs, dtype, op, world, factor)
    check_dtype_shape(p, dtype, expected.shape, what)
    if kind == "exact":
        assert_equal_exact(p, expected, what)
    else:
        assert_close(p, expected, tol, what)


# --------------------------------------------------------------------------
# Worker side
# --------------------------------------------------------------------------

def reduce_op(name: str, factor: float = 1.0):
    import torch.distributed as dist
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(factor)
    return getattr(dist.ReduceOp, name)


def attempt(fn: Callable, *args, **kwargs):
    """attempt runs one case; an exception becomes {"__error__": text} so the
    sweep goes on and the parent reports the case precisely."""
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # noqa: BLE001 - recorded, reported by the parent
        return {"__error__": f"{type(exc).__name__}: {exc}"}


class Ctx:
    """Ctx is what a worker function gets: who it is and how to (re)join."""

    def __init__(self, spec: dict):
        self.rank: int = spec["rank"]
        self.world_size: int = spec["world_size"]
        self.backend: str = spec["backend"]
        self.workdir: str = spec["workdir"]
        self.pg_timeout: float = spec["pg_timeout"]
        self.ports: list[int] = spec["ports"]
        self._init_kind: str = spec["init_method"]

    def init_method(self, name: str = "main", kind: str | None = None) -> str:
        kind = kind or self._init_kind
        if kind == "tcp":
            index = 0 if name == "main" else int(name)
            return f"tcp://127.0.0.1:{self.ports[index]}"
        return "file://" + os.path.join(self.workdir, f"store-{name}")

    def init(self, name: str = "main", timeout_s: float | None = None, kind: str | None = None):
        import torch.distributed as dist
        dist.init_process_group(
            self.backend,
            init_method=self.init_method(name, kind),
            rank=self.rank,
            world_size=self.world_size,
            timeout=datetime.timedelta(seconds=timeout_s or self.pg_timeout),
        )

    def pack(self, t) -> Packed:
        return pack(t, keep=(self.rank == 0))

    def store(self):
        import torch.distributed as dist
        return dist.distributed_c10d._get_default_store()


def _import_worker(module: str, path: str, qualname: str):
    for d in (os.path.dirname(path), REPO_ROOT):
        if d not in sys.path:
            sys.path.insert(0, d)
    try:
        mod = importlib.import_module(module)
    except ImportError:
        spec = importlib.util.spec_from_file_location(module, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[module] = mod
        spec.loader.exec_module(mod)
    obj = mod
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _ready_barrier(spec: dict):
    """Wait until every rank has imported torch (and gohccl): process start-up
    on a loaded machine can differ by seconds, more than the short process
    group timeouts some tests use for the rendezvous itself."""
    mine = os.path.join(spec["workdir"], f"ready-{spec['rank']}")
    with open(mine, "w"):
        pass
    paths = [os.path.join(spec["workdir"], f"ready-{r}") for r in range(spec["world_size"])]
    deadline = time.monotonic() + spec["startup_timeout"]
    while not all(os.path.exists(p) for p in paths):
        if time.monotonic() > deadline:
            missing = [r for r, p in enumerate(paths) if not os.path.exists(p)]
            raise TimeoutError(f"ranks {missing} did not start within {spec['startup_timeout']:.0f}s")
        time.sleep(0.01)


def _worker_main(spec_path: str):
    with open(spec_path, "rb") as f:
        spec = pickle.load(f)
    faulthandler.enable(all_threads=True)
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=False)
    payload: dict[str, Any]
    try:
        import torch
        torch.set_num_threads(1)
        if spec["backend"] == "gohccl":
            import gohccl  # noqa: F401 - registers the backend
        fn = _import_worker(spec["module"], spec["path"], spec["qualname"])
        ctx = Ctx(spec)
        _ready_barrier(spec)
        if spec["init"]:
            ctx.init()
        value = fn(ctx, *spec["args"])
        if spec["destroy"]:
            import torch.distributed as dist
            if dist.is_initialized():
                dist.destroy_process_group()
        payload = {"ok": True, "value": value}
    except BaseException:  # noqa: BLE001 - every failure goes to the parent
        payload = {"ok": False, "traceback": traceback.format_exc()}
    tmp = spec["result"] + ".tmp"
    with open(tmp, "wb") as f:
        pickle.dump(payload, f)
    os.replace(tmp, spec["result"])
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip interpreter teardown: atexit hooks of torch/gloo/Go threads must not
    # be able to hang a worker that has already reported.
    os._exit(0 if payload["ok"] else 1)


# --------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------

class WorkerFailure(AssertionError):
    """WorkerFailure carries every rank's status, traceback and output tail."""


def free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _tail(path: str, limit: int = 6000) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace")
    return text if len(text) <= limit else "...\n" + text[-limit:]


_WORKER_ENV = "GOHCCL_TEST_WORKER"


def launch(fn: Callable, world_size: int, backend: str, args: tuple = (), **kwargs) -> list[Any]:
    """launch runs fn(ctx, *args) on world_size fresh processes and returns
    each rank's return value, or raises WorkerFailure naming every rank's fate.
    Keyword arguments: see _launch."""
    if os.environ.get(_WORKER_ENV):
        # A worker that imports a module which launches at import time would
        # otherwise start workers of its own, and so on.
        raise RuntimeError("harness.launch called inside a worker process")
    workdir = tempfile.mkdtemp(prefix="gohccl-test-")
    try:
        return _launch(workdir, fn, world_size, backend, args, **kwargs)
    finally:
        _rmtree(workdir)


def _launch(workdir: str, fn: Callable, world_size: int, backend: str, args: tuple, *,
           timeout: float = 100.0, pg_timeout: float = 40.0, init: bool = True,
           destroy: bool = True, init_method: str = "file", env: dict | None = None,
           grace: float = 3.0) -> list[Any]:
    """timeout bounds the whole launch (start-up included); pg_timeout is the
    process group timeout given to init_process_group; grace is how long the
    other ranks may keep running after one rank failed."""
    child_env = dict(os.environ)
    child_env.update({
        _WORKER_ENV: "1",
        "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
        "PYTHONFAULTHANDLER": "1",
    })
    child_env.setdefault("GLOO_SOCKET_IFNAME", "lo")
    child_env["PYTHONPATH"] = os.pathsep.join(
        [TESTS_DIR] + ([child_env["PYTHONPATH"]] if child_env.get("PYTHONPATH") else []))
    if env:
        child_env.update(env)
    ports = free_ports(4)
    base = {
        "world_size": world_size, "backend": backend, "workdir": workdir,
        "module": fn.__module__ if fn.__module__ != "__main__" else "_launched_main",
        "path": inspect.getfile(fn), "qualname": fn.__qualname__,
        "args": tuple(args), "init": init, "destroy": destroy,
        "pg_timeout": pg_timeout, "init_method": init_method, "ports": ports,
        "startup_timeout": max(10.0, timeout - 10.0),
    }
    procs: list[subprocess.Popen | None] = [None] * world_size
    logs, results = [], []
    killed: set[int] = set()
    timed_out = False
    start = time.monotonic()
    try:
        for rank in range(world_size):
            spec = dict(base, rank=rank, result=os.path.join(workdir, f"result-{rank}.pkl"))
            spec_path = os.path.join(workdir, f"spec-{rank}.pkl")
            with open(spec_path, "wb") as f:
                pickle.dump(spec, f)
            log_path = os.path.join(workdir, f"log-{rank}.txt")
            logs.append(log_path)
            results.append(spec["result"])
            with open(log_path, "wb") as log:
                procs[rank] = subprocess.Popen(
                    [sys.executable, os.path.abspath(__file__), spec_path],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    env=child_env, cwd=REPO_ROOT, start_new_session=True)
        deadline = start + timeout
        first_failure = None
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                break
            now = time.monotonic()
            if first_failure is None and any(c not in (None, 0) for c in codes):
                first_failure = now
            if first_failure is not None and now - first_failure > grace:
                break
            if now > deadline:
                timed_out = True
                break
            time.sleep(0.02)
    finally:
        live = [r for r, p in enumerate(procs) if p is not None and p.poll() is None]
        for r in live:
            try:
                os.killpg(procs[r].pid, signal.SIGUSR1)  # dump stacks first
            except OSError:
                pass
        if live:
            time.sleep(1.0)
        for r in live:
            killed.add(r)
            try:
                os.killpg(procs[r].pid, signal.SIGKILL)
            except OSError:
                pass
        for p in procs:
            if p is not None:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
    elapsed = time.monotonic() - start

    values, problems = [], []
    for rank in range(world_size):
        payload = None
        try:
            with open(results[rank], "rb") as f:
                payload = pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError) as exc:
            payload = {"ok": False, "traceback": f"(no result: {exc})"}
        rc = procs[rank].returncode if procs[rank] is not None else None
        if payload.get("ok") and rank not in killed:
            values.append(payload["value"])
            continue
        values.append(None)
        fate = "killed by the harness" if rank in killed else f"exit code {rc}"
        problems.append(
            f"----- rank {rank}/{world_size} ({fate}) -----\n"
            f"{payload.get('traceback', '')}\n"
            f"----- rank {rank} output tail -----\n{_tail(logs[rank])}")
    if problems:
        head = (f"{fn.__qualname__} on backend {backend!r}, world {world_size}: "
                + (f"deadline of {timeout:.0f}s passed" if timed_out else "a rank failed")
                + f" after {elapsed:.1f}s")
        raise WorkerFailure(head + "\n" + "\n".join(problems))
    return values


def _rmtree(path: str):
    import shutil
    shutil.rmtree(path, ignore_errors=True)


_CACHE: dict = {}


def launch_cached(name: str, fn: Callable, world_size: int, backend: str, **kwargs):
    """launch_cached runs a sweep once per (name, backend, world) per session;
    every test that reads the sweep gets the same results (or failure)."""
    key = (name, backend, world_size)
    if key not in _CACHE:
        try:
            _CACHE[key] = (True, launch(fn, world_size, backend, **kwargs))
        except WorkerFailure as exc:
            _CACHE[key] = (False, str(exc))
    ok, value = _CACHE[key]
    if not ok:
        raise WorkerFailure(f"(cached sweep {name!r} failed)\n{value}")
    return value


def case_results(per_rank: list[dict], key: str, what: str) -> list:
    """case_results pulls one case out of every rank's sweep dict."""
    out = []
    for rank, d in enumerate(per_rank):
        if key not in d:
            raise CaseError(f"{what}: rank {rank} did not run case {key!r}")
        out.append(result_or_fail(d[key], f"{what} (rank {rank})"))
    return out


if __name__ == "__main__":
    sys.path.insert(0, TESTS_DIR)
    import harness as _harness  # the importable copy, so pickled types resolve
    _harness._worker_main(sys.argv[1])
