"""gohccl.bench.check: --check. Every rank fills its inputs from a closed form
(pattern) that every rank can evaluate for every other rank, so the expected
result of a collective is computed locally, in float64, and compared element
by element (count_wrong). GOHCCL_BENCH_CORRUPT is read here and nowhere else
(the package doc says what it is for)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .defs import EPS, FLOAT_DTYPES, REDUCING

if TYPE_CHECKING:
    from .defs import Layout
    from .timing import Buffers, Label


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

