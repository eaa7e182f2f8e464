"""In-place and overlapping all_to_all_single: all_to_all_single(t, t), and
an output that overlaps the input, give what separate tensors give (the shim
stages the input into a temporary when the two share memory), checked against
a numpy reference built from every rank's input, at 2, 3 and 4 ranks, with
equal and uneven (zero-row) splits, 1-D and 2-D, float and integer."""

import numpy as np
import pytest

from harness import attempt, case_results, launch_cached

WORLDS = [2, 3, 4]
COLS = 3
pytestmark = pytest.mark.timeout(240)


def rows_to(r, p, mode):
    """Rows rank r sends to rank p. Symmetric in (r, p), so every rank
    receives as many rows as it sends: in place, one tensor holds both."""
    if mode == "equal":
        return 2
    return (r + p) % 3  # includes zero-row blocks


def rank_input(r, ws, mode, dtype, two_d):
    """Rank r's input: its block for peer p holds rows valued
    r*1000 + p*100 + row (+ column/10 for 2-D floats)."""
    blocks = []
    for p in range(ws):
        n = rows_to(r, p, mode)
        base = r * 1000 + p * 100 + np.arange(n, dtype=np.float64)
        if two_d:
            base = base[:, None] + np.arange(COLS)[None, :] * (0.5 if dtype == "float32" else 7)
        blocks.append(base)
    shape = (0, COLS) if two_d else (0,)
    return np.concatenate(blocks) if blocks else np.zeros(shape)


def reference(r, ws, mode, dtype, two_d):
    """What rank r must hold after the all-to-all: from each peer p, p's
    block for r, in rank order."""
    out = []
    for p in range(ws):
        src = rank_input(p, ws, mode, dtype, two_d)
        start = sum(rows_to(p, q, mode) for q in range(r))
        out.append(src[start:start + rows_to(p, r, mode)])
    return np.concatenate(out)


CASES = [(mode, dtype, two_d, alias)
         for mode in ("equal", "uneven")
         for dtype in ("float32", "int64")
         for two_d in (False, True)
         for alias in ("same", "overlap")]


def case_id(c):
    return f"{c[0]}-{c[1]}-{'2d' if c[2] else '1d'}-{c[3]}"


def _sweep(ctx):
    import torch
    import torch.distributed as dist
    ws, r = ctx.world_size, ctx.rank
    out = {}
    for mode, dtype, two_d, alias in CASES:
        def one():
            src = torch.from_numpy(rank_input(r, ws, mode, dtype, two_d)).to(getattr(torch, dtype))
            splits = None if mode == "equal" else [rows_to(r, p, mode) for p in range(ws)]
            if alias == "same":
                t = src.clone()
                dist.all_to_all_single(t, t, output_split_sizes=splits, input_split_sizes=splits)
                result = t
            else:
                # One buffer; the input is its first rows, the output starts
                # one row later (a partial overlap).
                n = src.shape[0]
                buf = torch.zeros((n + 1,) + tuple(src.shape[1:]), dtype=src.dtype)
                buf[:n] = src
                inp, result = buf[:n], buf[1:]
                dist.all_to_all_single(result, inp, output_split_sizes=splits, input_split_sizes=splits)
            return result.numpy().tolist()
        out[case_id((mode, dtype, two_d, alias))] = attempt(one)
    return out


@pytest.mark.parametrize("world", WORLDS, ids=lambda w: f"w{w}")
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_all_to_all_single_in_place(backend, world, case):
    if backend != "gohccl":
        pytest.skip("gloo's in-place all_to_all_single is wrong too (issue 21); gohccl's must not be")
    mode, dtype, two_d, _ = case
    res = launch_cached("inplace-a2a", _sweep, world, backend, timeout=180)
    got = case_results(res, case_id(case), case_id(case))
    for r in range(world):
        want = reference(r, world, mode, dtype, two_d)
        assert np.array_equal(np.asarray(got[r], dtype=np.float64).reshape(want.shape), want), \
            f"rank {r} of {world}: {got[r]} != {want.tolist()}"
