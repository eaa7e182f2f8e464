"""gohccl.bench.defs: what the bench measures, in plain data and arithmetic:
the collectives, operators and dtypes it knows, nccl-tests' bus-bandwidth
formulas, byte counts and sweeps, and how a size maps onto one collective's
buffers. Nothing here imports torch."""

from __future__ import annotations

import dataclasses

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
DTYPE_ALIASES = {alias: row[0] for row in _DTYPE_TABLE for alias in row[2]}
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


COLLECTIVE_ALIASES = {"allreduce": "all_reduce", "allgather": "all_gather",
                       "reducescatter": "reduce_scatter", "alltoall": "all_to_all",
                       "all2all": "all_to_all", "send_recv": "sendrecv", "bcast": "broadcast"}


def human_bytes(n: int) -> str:
    """human_bytes writes a size the way -b/-e take it: 512, 4K, 32M."""
    for suffix, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{suffix}"
    return str(n)


