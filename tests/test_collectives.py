"""Collectives end to end: all_reduce over every dtype x op x size, the data
movement collectives over every dtype and size and every root, the object
collectives, zero-element and non-contiguous tensors.

Each world size runs two sweeps (one launch each): the all_reduce sweep and
the movement sweep. Tests read one case each from the cached results and
check it against a numpy reference computed here from regenerated inputs.
"""

import os
import sys
import zlib

import numpy as np
import pytest

from harness import (
    DTYPES, FLOAT_DTYPES, WORLD_SIZES, assert_equal_exact, assert_same_on_all_ranks,
    attempt, bits_of_values, case_results, check_dtype_shape, check_reduction,
    fill_garbage, gen_tensor, gen_values, launch, launch_cached, pack, reduce_op, skip_reason,
    CaseError,
)

SEED = 1357
SWEEP_TIMEOUT = 420  # harness deadline of one sweep launch (s)
TEST_TIMEOUT = SWEEP_TIMEOUT + 60

LARGE = (100_003,)
AR_SHAPES = [(0,), (1,), (7,), (1023,), (3, 5, 7), (2, 0, 3), ()]
PREMUL_FACTOR = 3.0


def crc(key: str) -> int:
    return zlib.crc32(key.encode())


def shape_id(shape) -> str:
    return "x".join(str(s) for s in shape) if shape else "scalar"


def ar_ops(dtype):
    if dtype in FLOAT_DTYPES:
        return ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM"]
    if dtype == "bool":
        # AVG of booleans has no agreed meaning (NCCL-backed torch refuses it);
        # test_all_reduce_bool_avg checks only that the backend is consistent.
        return ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
    return ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]


def ar_shapes(dtype, op):
    # The scalar and the zero-sized multi-dimensional shape once per dtype family
    # of ops is enough; every op gets 0, 1, odd, 1023 and a 3-d shape.
    shapes = [s for s in AR_SHAPES if s not in ((), (2, 0, 3)) or op in ("SUM", "MAX", "BXOR")]
    if (op in ("SUM", "MAX") or (dtype == "float32" and op in ("AVG", "PREMUL_SUM", "PRODUCT"))
            or (dtype == "int64" and op == "BXOR")):
        shapes.append(LARGE)
    return shapes


def kind_for(op):
    return {"AVG": "small", "PRODUCT": "product"}.get(op, "any")


def ar_key(dtype, op, shape):
    return f"ar/{dtype}/{op}/{shape_id(shape)}"


AR_PARAMS = [(d, o) for d in DTYPES for o in ar_ops(d)]

NONCONTIG_CASES = [
    ("float32", "SUM", "transpose"), ("int64", "BXOR", "transpose"),
    ("float16", "MAX", "transpose"), ("float32", "SUM", "slice"), ("int32", "SUM", "slice"),
]
BITWISE_ON_FLOAT = [("float32", "BAND"), ("float64", "BOR"), ("bfloat16", "BXOR")]


# ----------------------------------------------------------------- workers

def _all_reduce_one(ctx, dtype, op, shape):
    import torch.distributed as dist
    key = ar_key(dtype, op, shape)
    t = gen_tensor(SEED, ctx.rank, dtype, shape, kind_for(op), crc(key))
    ret = dist.all_reduce(t, op=reduce_op(op, PREMUL_FACTOR))
    if ret is not None:
        raise AssertionError(f"synchronous all_reduce returned {ret!r}, expected None")
    return ctx.pack(t)


def _noncontig_one(ctx, dtype, op, how):
    import torch.distributed as dist
    key = f"noncontig/{dtype}/{op}/{how}"
    base = gen_tensor(SEED, ctx.rank, dtype, (5, 6), kind_for(op), crc(key))
    view = base.t() if how == "transpose" else base[:, ::2]
    assert not view.is_contiguous()
    try:
        dist.all_reduce(view, op=reduce_op(op))
    except Exception as exc:  # noqa: BLE001 - a clear refusal is allowed
        return {"raised": f"{type(exc).__name__}: {exc}"}
    return {"view": pack(view), "base": pack(base)}


def _expect_error(fn):
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        return {"raised": f"{type(exc).__name__}: {exc}"}
    return {"raised": None}


def _check_group_works(ctx, tag):
    """A collective after an error must still succeed with the right value."""
    import torch
    import torch.distributed as dist
    t = torch.full((5,), float(ctx.rank + 1 + tag), dtype=torch.float64)
    dist.all_reduce(t)
    return t.tolist()


def allreduce_sweep(ctx):
    import torch.distributed as dist
    out = {}
    for dtype, op in AR_PARAMS:
        if skip_reason(ctx.backend, dtype=dtype, op=op):
            continue
        for shape in ar_shapes(dtype, op):
            out[ar_key(dtype, op, shape)] = attempt(_all_reduce_one, ctx, dtype, op, shape)
    for dtype, op, how in NONCONTIG_CASES:
        if how == "slice" and skip_reason(ctx.backend, feature="strided_slice"):
            continue
        out[f"noncontig/{dtype}/{op}/{how}"] = attempt(_noncontig_one, ctx, dtype, op, how)
    out["after_noncontig"] = attempt(_check_group_works, ctx, 1)
    for dtype, op in BITWISE_ON_FLOAT:
        t = gen_tensor(SEED, ctx.rank, dtype, (4,))
        out[f"bitwise_float/{dtype}/{op}"] = _expect_error(
            lambda t=t, op=op: dist.all_reduce(t, op=reduce_op(op)))
    out["after_bitwise_float"] = attempt(_check_group_works, ctx, 2)

    def bool_avg():
        t = gen_tensor(SEED, ctx.rank, "bool", (9,))
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        return pack(t)
    try:
        out["bool_avg"] = {"value": bool_avg()}
    except Exception as exc:  # noqa: BLE001
        out["bool_avg"] = {"raised": f"{type(exc).__name__}: {exc}"}
    out["after_bool_avg"] = attempt(_check_group_works, ctx, 3)
    return out


MV_SHAPES = [(0,), (1,), (7,), (1023,), (3, 5, 7)]


def mv_shapes(dtype):
    return MV_SHAPES + ([LARGE] if dtype in ("float32", "int8") else [])


# Rooted collectives run every root for these shapes, and the last root for the rest.
ALL_ROOT_SHAPES = ((0,), (7,))


def mv_roots(shape, world):
    return range(world) if tuple(shape) in ALL_ROOT_SHAPES else [world - 1]


def rs_ops(shape):
    return RS_OPS if tuple(shape) in ((7,), (3, 5, 7)) else ["SUM"]


def mv_key(kind, dtype, shape, extra=""):
    return f"{kind}/{dtype}/{shape_id(shape)}{extra}"


def a2a_count(src, dst):
    """How many rows rank src sends to rank dst: uneven, zero for some pairs."""
    return (3 * src + dst + 1) % 4


A2A_TRAILS = [(), (3,)]
RS_OPS = ["SUM", "MAX"]


def _empty(dtype, shape, salt=0):
    import torch
    return fill_garbage(torch.empty(shape, dtype=getattr(torch, dtype)), salt)


def _mv_all_gather(ctx, dtype, shape):
    import torch.distributed as dist
    key = mv_key("ag", dtype, shape)
    inp = gen_tensor(SEED, ctx.rank, dtype, shape, "any", crc(key))
    outs = [_empty(dtype, shape, j) for j in range(ctx.world_size)]
    dist.all_gather(outs, inp)
    return [ctx.pack(o) for o in outs]


def _mv_agit(ctx, dtype, shape, layout):
    import torch.distributed as dist
    key = mv_key("agit", dtype, shape)
    inp = gen_tensor(SEED, ctx.rank, dtype, shape, "any", crc(key))
    ws = ctx.world_size
    oshape = (ws * shape[0],) + tuple(shape[1:]) if layout == "concat" else (ws,) + tuple(shape)
    out = _empty(dtype, oshape)
    dist.all_gather_into_tensor(out, inp)
    return ctx.pack(out)


def _mv_reduce_scatter(ctx, dtype, shape, op):
    import torch.distributed as dist
    key = mv_key("rs", dtype, shape, "/" + op)
    inputs = [gen_tensor(SEED, ctx.rank, dtype, shape, "any", crc(key) + j)
              for j in range(ctx.world_size)]
    out = _empty(dtype, shape)
    dist.reduce_scatter(out, inputs, op=reduce_op(op))
    return pack(out)


def _mv_reduce_scatter_tensor(ctx, dtype, shape, op):
    import torch.distributed as dist
    key = mv_key("rst", dtype, shape, "/" + op)
    ws = ctx.world_size
    inp = gen_tensor(SEED, ctx.rank, dtype, (ws * shape[0],) + tuple(shape[1:]), "any", crc(key))
    out = _empty(dtype, shape)
    dist.reduce_scatter_tensor(out, inp, op=reduce_op(op))
    return pack(out)


def _mv_broadcast(ctx, dtype, shape, root):
    import torch.distributed as dist
    key = mv_key("bcast", dtype, shape, f"/root{root}")
    t = gen_tensor(SEED, ctx.rank, dtype, shape, "any", crc(key))
    dist.broadcast(t, src=root)
    return ctx.pack(t)


def _mv_reduce(ctx, dtype, shape, root):
    import torch.distributed as dist
    key = mv_key("reduce", dtype, shape, f"/root{root}")
    t = gen_tensor(SEED, ctx.rank, dtype, shape, "any", crc(key))
    dist.reduce(t, dst=root, op=dist.ReduceOp.SUM)
    return pack(t) if ctx.rank == root else None


def _mv_gather(ctx, dtype, shape, root):
    import torch.distributed as dist
    key = mv_key("gather", dtype, shape, f"/root{root}")
    inp = gen_tensor(SEED, ctx.rank, dtype, shape, "any", crc(key))
    gl = [_empty(dtype, shape, j) for j in range(ctx.world_size)] if ctx.rank == root else None
    dist.gather(inp, gather_list=gl, dst=root)
    return [pack(g) for g in gl] if gl is not None else None


def _mv_scatter(ctx, dtype, shape, root):
    import torch.distributed as dist
    key = mv_key("scatter", dtype, shape, f"/root{root}")
    sl = None
    if ctx.rank == root:
        sl = [gen_tensor(SEED, root, dtype, shape, "any", crc(key) + j)
              for j in range(ctx.world_size)]
    out = _empty(dtype, shape)
    dist.scatter(out, scatter_list=sl, src=root)
    return pack(out)


def _mv_all_to_all(ctx, dtype, trail, mode):
    import torch.distributed as dist
    key = f"a2a/{dtype}/{shape_id(trail)}/{mode}"
    ws, r = ctx.world_size, ctx.rank
    inputs = [gen_tensor(SEED, r, dtype, (a2as_splits(mode, r, j),) + trail, "any", crc(key) + j)
              for j in range(ws)]
    outputs = [_empty(dtype, (a2as_splits(mode, j, r),) + trail, j) for j in range(ws)]
    dist.all_to_all(outputs, inputs)
    return [pack(o) for o in outputs]


def a2as_splits(mode, src, dst):
    if mode == "uneven":
        return a2a_count(src, dst)
    if mode == "even":
        return 2
    return 0  # "zero": every split empty


def _mv_all_to_all_single(ctx, dtype, trail, mode):
    import torch.distributed as dist
    key = f"a2as/{dtype}/{shape_id(trail)}/{mode}"
    ws, r = ctx.world_size, ctx.rank
    in_splits = [a2as_splits(mode, r, j) for j in range(ws)]
    out_splits = [a2as_splits(mode, j, r) for j in range(ws)]
    inp = gen_tensor(SEED, r, dtype, (sum(in_splits),) + trail, "any", crc(key))
    out = _empty(dtype, (sum(out_splits),) + trail)
    if mode == "even":
        dist.all_to_all_single(out, inp)
    else:
        dist.all_to_all_single(out, inp, output_split_sizes=out_splits,
                               input_split_sizes=in_splits)
    return pack(out)


COALESCED = [("float32", "SUM"), ("float32", "MAX"), ("int64", "SUM"), ("float64", "MIN")]
COALESCED_SHAPES = [(7,), (3, 4), (0,), (1023,)]


def _coalesced(ctx, dtype, op):
    import torch.distributed as dist
    if not hasattr(dist, "all_reduce_coalesced"):
        return {"missing": True}
    key = f"coalesced/{dtype}/{op}"
    ts = [gen_tensor(SEED, ctx.rank, dtype, s, "any", crc(key) + i)
          for i, s in enumerate(COALESCED_SHAPES)]
    dist.all_reduce_coalesced(ts, op=reduce_op(op))
    return [ctx.pack(t) for t in ts]


def _barrier(ctx):
    import time
    import torch.distributed as dist
    times = []
    for i in range(3):
        time.sleep(0.05 * ((ctx.rank + i) % ctx.world_size))
        arrive = time.time()
        dist.barrier()
        times.append((arrive, time.time()))
    return times


def make_object(rank, tag):
    return {"rank": rank, "tag": tag, "text": "g" * (37 * rank + tag),
            "nested": [rank, (tag, str(rank)), {"k": [1.5 * rank] * (rank + 1)}]}


def _objects(ctx):
    import torch.distributed as dist
    ws, r = ctx.world_size, ctx.rank
    out = {}
    got = [None] * ws
    dist.all_gather_object(got, make_object(r, 0))
    out["all_gather_object"] = got
    for root in range(ws):
        lst = [make_object(root, 10 + i) for i in range(3)] if r == root else [None] * 3
        dist.broadcast_object_list(lst, src=root)
        out[f"broadcast_object_list/{root}"] = lst
        inp = [make_object(j, 20 + root) for j in range(ws)] if r == root else None
        recv = [None]
        dist.scatter_object_list(recv, inp, src=root)
        out[f"scatter_object_list/{root}"] = recv[0]
        gl = [None] * ws if r == root else None
        dist.gather_object(make_object(r, 30 + root), gl, dst=root)
        out[f"gather_object/{root}"] = gl
    # A large object: several MB through broadcast and all_gather.
    big = [big_object(ws - 1)] if r == ws - 1 else [None]
    dist.broadcast_object_list(big, src=ws - 1)
    out["big_broadcast"] = big[0] == big_object(ws - 1)
    got = [None] * ws
    dist.all_gather_object(got, big_object(r))
    out["big_all_gather"] = [g == big_object(j) for j, g in enumerate(got)]
    return out


def big_object(rank):
    return {"rank": rank, "blob": bytes(range(256)) * (12_000 + 1000 * rank)}


def _noncontig_movement(ctx, kind):
    """Broadcast / all_gather / all_to_all_single from transposed views."""
    import torch.distributed as dist
    key = f"ncmv/{kind}"
    base = gen_tensor(SEED, ctx.rank, "float32", (4, 3 * ctx.world_size), "any", crc(key))
    view = base.t()
    try:
        if kind == "broadcast":
            dist.broadcast(view, src=0)
            return {"value": pack(view)}
        if kind == "all_gather":
            outs = [_empty("float32", tuple(view.shape), j) for j in range(ctx.world_size)]
            dist.all_gather(outs, view)
            return {"value": [pack(o) for o in outs]}
        if kind == "all_to_all_single":
            out = _empty("float32", tuple(view.shape))
            dist.all_to_all_single(out, view)
            return {"value": pack(out)}
    except Exception as exc:  # noqa: BLE001 - a clear refusal is allowed
        return {"raised": f"{type(exc).__name__}: {exc}"}
    raise ValueError(kind)


NONCONTIG_MOVEMENT = ["broadcast", "all_gather", "all_to_all_single"]


def movement_sweep(ctx):
    ws = ctx.world_size
    out = {}
    for dtype in DTYPES:
        if skip_reason(ctx.backend, dtype=dtype):
            continue
        for shape in mv_shapes(dtype):
            out[mv_key("ag", dtype, shape)] = attempt(_mv_all_gather, ctx, dtype, shape)
            for layout in ("concat", "stacked"):
                if layout == "stacked" and skip_reason(ctx.backend, feature="stacked_allgather"):
                    continue
                out[mv_key("agit", dtype, shape, "/" + layout)] = attempt(
                    _mv_agit, ctx, dtype, shape, layout)
            for op in rs_ops(shape):
                out[mv_key("rs", dtype, shape, "/" + op)] = attempt(
                    _mv_reduce_scatter, ctx, dtype, shape, op)
                out[mv_key("rst", dtype, shape, "/" + op)] = attempt(
                    _mv_reduce_scatter_tensor, ctx, dtype, shape, op)
            for root in mv_roots(shape, ws):
                out[mv_key("bcast", dtype, shape, f"/root{root}")] = attempt(
                    _mv_broadcast, ctx, dtype, shape, root)
                out[mv_key("reduce", dtype, shape, f"/root{root}")] = attempt(
                    _mv_reduce, ctx, dtype, shape, root)
                out[mv_key("gather", dtype, shape, f"/root{root}")] = attempt(
                    _mv_gather, ctx, dtype, shape, root)
                out[mv_key("scatter", dtype, shape, f"/root{root}")] = attempt(
                    _mv_scatter, ctx, dtype, shape, root)
        for trail in A2A_TRAILS:
            for mode in ("uneven", "even"):
                if mode == "uneven" and skip_reason(ctx.backend, feature="uneven_all_to_all_list"):
                    continue
                out[f"a2a/{dtype}/{shape_id(trail)}/{mode}"] = attempt(
                    _mv_all_to_all, ctx, dtype, trail, mode)
            for mode in ("uneven", "even", "zero"):
                out[f"a2as/{dtype}/{shape_id(trail)}/{mode}"] = attempt(
                    _mv_all_to_all_single, ctx, dtype, trail, mode)
    for dtype, op in COALESCED:
        out[f"coalesced/{dtype}/{op}"] = attempt(_coalesced, ctx, dtype, op)
    out["barrier"] = attempt(_barrier, ctx)
    out["objects"] = attempt(_objects, ctx)
    for kind in NONCONTIG_MOVEMENT:
        out[f"ncmv/{kind}"] = attempt(_noncontig_movement, ctx, kind)
    out["after_ncmv"] = attempt(_check_group_works, ctx, 4)
    return out


def collectives_sweep(ctx):
    """One launch per world size runs both sweeps: a process start costs
    seconds on a loaded 2-core machine, a collective milliseconds."""
    out = allreduce_sweep(ctx)
    out.update(movement_sweep(ctx))
    return out


def allreduce_results(backend, world):
    return launch_cached("collectives", collectives_sweep, world, backend, timeout=SWEEP_TIMEOUT)


movement_results = allreduce_results


def skip_if(backend, **kw):
    reason = skip_reason(backend, **kw)
    if reason:
        pytest.skip(reason)


def check_group_works(per_rank, key, world, tag):
    values = case_results(per_rank, key, key)
    want = float(sum(r + 1 + tag for r in range(world)))
    for rank, v in enumerate(values):
        assert v == [want] * 5, f"{key}: rank {rank} got {v}, expected {[want] * 5}"


# ------------------------------------------------------------------- tests

pytestmark = pytest.mark.timeout(TEST_TIMEOUT)
worlds = pytest.mark.parametrize("world", WORLD_SIZES, ids=lambda w: f"w{w}")


@worlds
@pytest.mark.parametrize("dtype,op", AR_PARAMS)
def test_all_reduce(backend, world, dtype, op):
    skip_if(backend, dtype=dtype, op=op)
    res = allreduce_results(backend, world)
    for shape in ar_shapes(dtype, op):
        key = ar_key(dtype, op, shape)
        what = f"all_reduce {dtype} {op} shape {shape} world {world}"
        packs = case_results(res, key, what)
        for p in packs:
            check_dtype_shape(p, dtype, shape, what)
        assert_same_on_all_ranks(packs, what)
        inputs = [gen_values(SEED, r, dtype, shape, kind_for(op), crc(key)) for r in range(world)]
        check_reduction(packs[0], inputs, dtype, op, world, what, PREMUL_FACTOR)


@worlds
@pytest.mark.parametrize("dtype,op,how", NONCONTIG_CASES)
def test_all_reduce_noncontiguous(backend, world, dtype, op, how):
    """A strided view is either reduced in place correctly or refused clearly."""
    if how == "slice":
        skip_if(backend, feature="strided_slice")
    res = allreduce_results(backend, world)
    key = f"noncontig/{dtype}/{op}/{how}"
    what = f"all_reduce of a {how} view, {dtype} {op}, world {world}"
    outcome = case_results(res, key, what)
    raised = [o.get("raised") for o in outcome]
    if any(raised):
        assert all(raised), f"{what}: only some ranks raised: {raised}"
        for msg in raised:
            assert any(w in msg.lower() for w in ("contiguous", "stride", "dense")), (
                f"{what}: refusal does not say why: {msg}")
    else:
        inputs = [gen_values(SEED, r, dtype, (5, 6), kind_for(op), crc(key)) for r in range(world)]
        views = [x.T if how == "transpose" else x[:, ::2] for x in inputs]
        views_packs = [o["view"] for o in outcome]
        assert_same_on_all_ranks(views_packs, what)
        check_reduction(views_packs[0], views, dtype, op, world, what)
        if how == "slice":
            for r, o in enumerate(outcome):
                base = o["base"]
                untouched = base.data.reshape(5, 6)[:, 1::2]
                assert_equal_exact(
                    pack_like(untouched, dtype), bits_of_values(inputs[r][:, 1::2], dtype),
                    f"{what}: elements outside the view on rank {r}")
    check_group_works(res, "after_noncontig", world, 1)


def pack_like(arr, dtype):
    from harness import Packed
    return Packed(dtype, tuple(arr.shape), "", np.ascontiguousarray(arr))


@worlds
def test_all_reduce_bitwise_op_on_float_raises(backend, world):
    res = allreduce_results(backend, world)
    for dtype, op in BITWISE_ON_FLOAT:
        key = f"bitwise_float/{dtype}/{op}"
        for rank, o in enumerate(case_results(res, key, key)):
            msg = o["raised"]
            assert msg, f"all_reduce({op}) on {dtype} succeeded on rank {rank}; it must raise"
            low = msg.lower()
            assert op.lower() in low or "bitwise" in low, f"{key}: message does not name the op: {msg}"
            assert any(w in low for w in ("float", "integ", "dtype", "type", dtype)), (
                f"{key}: message does not name the dtype problem: {msg}")
    check_group_works(res, "after_bitwise_float", world, 2)


@worlds
def test_all_reduce_bool_avg(backend, world):
    """AVG over bool: refused on every rank, or the same result on every rank."""
    res = allreduce_results(backend, world)
    outcome = case_results(res, "bool_avg", "bool_avg")
    if any("raised" in o for o in outcome):
        assert all("raised" in o for o in outcome), f"bool AVG raised on some ranks only: {outcome}"
    else:
        assert_same_on_all_ranks([o["value"] for o in outcome], "bool AVG")
    check_group_works(res, "after_bool_avg", world, 3)


MV_DTYPE_PARAMS = pytest.mark.parametrize("dtype", DTYPES)


def input_bits(world_rank, dtype, shape, key, offset=0):
    return bits_of_values(gen_values(SEED, world_rank, dtype, shape, "any", crc(key) + offset), dtype)


@worlds
@MV_DTYPE_PARAMS
def test_all_gather(backend, world, dtype):
    skip_if(backend, dtype=dtype)
    res = movement_results(backend, world)
    for shape in mv_shapes(dtype):
        key = mv_key("ag", dtype, shape)
        what = f"all_gather {dtype} {shape} world {world}"
        lists = case_results(res, key, what)
        for r, lst in enumerate(lists):
            assert len(lst) == world, f"{what}: rank {r} returned {len(lst)} tensors"
        for j in range(world):
            assert_same_on_all_ranks([lst[j] for lst in lists], f"{what}, slot {j}")
            assert_equal_exact(lists[0][j], input_bits(j, dtype, shape, key), f"{what}, slot {j}")


@worlds
@MV_DTYPE_PARAMS
@pytest.mark.parametrize("layout", ["concat", "stacked"])
def test_all_gather_into_tensor(backend, world, dtype, layout):
    skip_if(backend, dtype=dtype)
    if layout == "stacked":
        skip_if(backend, feature="stacked_allgather")
    res = movement_results(backend, world)
    for shape in mv_shapes(dtype):
        key = mv_key("agit", dtype, shape)
        what = f"all_gather_into_tensor ({layout}) {dtype} {shape} world {world}"
        packs = case_results(res, mv_key("agit", dtype, shape, "/" + layout), what)
        assert_same_on_all_ranks(packs, what)
        parts = [input_bits(j, dtype, shape, key) for j in range(world)]
        want = np.concatenate(parts, axis=0) if layout == "concat" else np.stack(parts)
        assert_equal_exact(packs[0], want, what)


@worlds
@MV_DTYPE_PARAMS
@pytest.mark.parametrize("op", RS_OPS)
@pytest.mark.parametrize("api", ["list", "tensor"])
def test_reduce_scatter(backend, world, dtype, op, api):
    skip_if(backend, dtype=dtype)
    res = movement_results(backend, world)
    for shape in mv_shapes(dtype):
        if op not in rs_ops(shape):
            continue
        kind = "rs" if api == "list" else "rst"
        key = mv_key(kind, dtype, shape, "/" + op)
        what = f"reduce_scatter ({api}) {dtype} {op} {shape} world {world}"
        packs = case_results(res, key, what)
        for r, p in enumerate(packs):
            if api == "list":
                inputs = [gen_values(SEED, i, dtype, shape, "any", crc(key) + r) for i in range(world)]
            else:
                full = (world * shape[0],) + tuple(shape[1:])
                inputs = [gen_values(SEED, i, dtype, full, "any", crc(key))[r * shape[0]:(r + 1) * shape[0]]
                          for i in range(world)]
            check_reduction(p, inputs, dtype, op, world, f"{what}, rank {r}")


@worlds
@MV_DTYPE_PARAMS
def test_broadcast(backend, world, dtype):
    skip_if(backend, dtype=dtype)
    res = movement_results(backend, world)
    for shape in mv_shapes(dtype):
        for root in mv_roots(shape, world):
            key = mv_key("bcast", dtype, shape, f"/root{root}")
            what = f"broadcast {dtype} {shape} root {root} world {world}"
            packs = case_results(res, key, what)
            assert_same_on_all_ranks(packs, what)
            assert_equal_exact(packs[0], input_bits(root, dtype, shape, key), what)


@worlds
@MV_DTYPE_PARAMS
def test_reduce(backend, world, dtype):
    skip_if(backend, dtype=dtype)
    res = movement_results(backend, world)
    for shape in mv_shapes(dtype):
        for root in mv_roots(shape, world):
            key = mv_key("reduce", dtype, shape, f"/root{root}")
            what = f"reduce {dtype} SUM {shape} root {root} world {world}"
            packs = case_results(res, key, what)
            inputs = [gen_values(SEED, i, dtype, shape, "any", crc(key)) for i in range(world)]
            check_reduction(packs[root], inputs, dtype, "SUM", world, what)


@worlds
@MV_DTYPE_PARAMS
def test_gather(backend, world, dtype):
    skip_if(backend, dtype=dtype)
    res = movement_results(backend, world)
    for shape in mv_shapes(dtype):
        for root in mv_roots(shape, world):
            key = mv_key("gather", dtype, shape, f"/root{root}")
            what = f"gather {dtype} {shape} root {root} world {world}"
            lst = case_results(res, key, what)[root]
            assert len(lst) == world, f"{what}: {len(lst)} tensors gathered"
            for j in range(world):
                assert_equal_exact(lst[j], input_bits(j, dtype, shape, key), f"{what}, slot {j}")


@worlds
@MV_DTYPE_PARAMS
def test_scatter(backend, world, dtype):
    skip_if(backend, dtype=dtype)
    res = movement_results(backend, world)
    for shape in mv_shapes(dtype):
        for root in mv_roots(shape, world):
            key = mv_key("scatter", dtype, shape, f"/root{root}")
            what = f"scatter {dtype} {shape} root {root} world {world}"
            for r, p in enumerate(case_results(res, key, what)):
                assert_equal_exact(p, input_bits(root, dtype, shape, key, offset=r), f"{what}, rank {r}")


@worlds
@MV_DTYPE_PARAMS
@pytest.mark.parametrize("trail", A2A_TRAILS, ids=shape_id)
@pytest.mark.parametrize("mode", ["uneven", "even"])
def test_all_to_all(backend, world, dtype, trail, mode):
    skip_if(backend, dtype=dtype)
    if mode == "uneven":
        skip_if(backend, feature="uneven_all_to_all_list")
    res = movement_results(backend, world)
    key = f"a2a/{dtype}/{shape_id(trail)}/{mode}"
    what = f"all_to_all (list, {mode} sizes) {dtype} rows x {trail} world {world}"
    for r, lst in enumerate(case_results(res, key, what)):
        assert len(lst) == world, f"{what}: rank {r} got {len(lst)} tensors"
        for j in range(world):
            want = input_bits(j, dtype, (a2as_splits(mode, j, r),) + trail, key, offset=r)
            assert_equal_exact(lst[j], want, f"{what}: rank {r} from {j}")


@worlds
@MV_DTYPE_PARAMS
@pytest.mark.parametrize("trail", A2A_TRAILS, ids=shape_id)
@pytest.mark.parametrize("mode", ["uneven", "even", "zero"])
def test_all_to_all_single(backend, world, dtype, trail, mode):
    skip_if(backend, dtype=dtype)
    res = movement_results(backend, world)
    key = f"a2as/{dtype}/{shape_id(trail)}/{mode}"
    what = f"all_to_all_single ({mode} splits) {dtype} rows x {trail} world {world}"
    inputs = []
    for j in range(world):
        rows = sum(a2as_splits(mode, j, k) for k in range(world))
        inputs.append(bits_of_values(gen_values(SEED, j, dtype, (rows,) + trail, "any", crc(key)), dtype))
    for r, p in enumerate(case_results(res, key, what)):
        parts = []
        for j in range(world):
            start = sum(a2as_splits(mode, j, k) for k in range(r))
            parts.append(inputs[j][start:start + a2as_splits(mode, j, r)])
        assert_equal_exact(p, np.concatenate(parts, axis=0), f"{what}: rank {r}")


@worlds
def test_barrier(backend, world):
    res = movement_results(backend, world)
    times = case_results(res, "barrier", "barrier")
    for i in range(3):
        last_arrival = max(t[i][0] for t in times)
        first_leave = min(t[i][1] for t in times)
        assert first_leave >= last_arrival - 0.005, (
            f"barrier {i}: a rank left at {first_leave:.3f} before the last arrived at {last_arrival:.3f}")


@worlds
@pytest.mark.parametrize("dtype,op", COALESCED)
def test_all_reduce_coalesced(backend, world, dtype, op):
    res = movement_results(backend, world)
    key = f"coalesced/{dtype}/{op}"
    got = case_results(res, key, key)
    if isinstance(got[0], dict) and got[0].get("missing"):
        pytest.skip("torch.distributed.all_reduce_coalesced is not present")
    for i, shape in enumerate(COALESCED_SHAPES):
        what = f"all_reduce_coalesced {dtype} {op} tensor {i} {shape} world {world}"
        packs = [g[i] for g in got]
        assert_same_on_all_ranks(packs, what)
        inputs = [gen_values(SEED, r, dtype, shape, "any", crc(key) + i) for r in range(world)]
        check_reduction(packs[0], inputs, dtype, op, world, what)


@worlds
def test_object_collectives(backend, world):
    res = movement_results(backend, world)
    per_rank = case_results(res, "objects", "object collectives")
    for r, out in enumerate(per_rank):
        assert out["all_gather_object"] == [make_object(j, 0) for j in range(world)], (
            f"all_gather_object on rank {r}: {out['all_gather_object']}")
        for root in range(world):
            assert out[f"broadcast_object_list/{root}"] == [make_object(root, 10 + i) for i in range(3)], (
                f"broadcast_object_list root {root} on rank {r}")
            assert out[f"scatter_object_list/{root}"] == make_object(r, 20 + root), (
                f"scatter_object_list root {root} on rank {r}: {out[f'scatter_object_list/{root}']}")
            if r == root:
                assert out[f"gather_object/{root}"] == [make_object(j, 30 + root) for j in range(world)], (
                    f"gather_object root {root}")
        assert out["big_broadcast"], f"broadcast_object_list of a 3 MB object on rank {r}"
        assert out["big_all_gather"] == [True] * world, f"all_gather_object of 3 MB objects on rank {r}"


@worlds
@pytest.mark.parametrize("kind", NONCONTIG_MOVEMENT)
def test_noncontiguous_movement(backend, world, kind):
    res = movement_results(backend, world)
    key = f"ncmv/{kind}"
    what = f"{kind} from a transposed view, world {world}"
    outcome = case_results(res, key, what)
    raised = [o.get("raised") for o in outcome]
    if any(raised):
        assert all(raised), f"{what}: only some ranks raised: {raised}"
        for msg in raised:
            assert any(w in msg.lower() for w in ("contiguous", "stride", "dense")), (
                f"{what}: refusal does not say why: {msg}")
    else:
        views = [gen_values(SEED, j, "float32", (4, 3 * world), "any", crc(key)).T for j in range(world)]
        for r, o in enumerate(outcome):
            if kind == "broadcast":
                assert_equal_exact(o["value"], views[0], f"{what}: rank {r}")
            elif kind == "all_gather":
                for j in range(world):
                    assert_equal_exact(o["value"][j], views[j], f"{what}: rank {r} slot {j}")
            else:
                want = np.concatenate([views[j][3 * r:3 * r + 3] for j in range(world)], axis=0)
                assert_equal_exact(o["value"], want, f"{what}: rank {r}")
    check_group_works(res, "after_ncmv", world, 4)


def test_reference_self_check():
    """The numpy references themselves: a few hand-computed values."""
    from harness import reduce_reference
    a = np.array([100, -128, 7], dtype=np.int8)
    b = np.array([100, -1, -7], dtype=np.int8)
    kind, out, _ = reduce_reference([a, b], "int8", "SUM", 2)
    assert out.tolist() == [-56, 127, 0]
    kind, out, _ = reduce_reference([a, b], "int8", "AVG", 2)
    assert out.tolist() == [100, -64, 0]
    kind, out, _ = reduce_reference([np.array([-3], np.int32), np.array([0], np.int32)], "int32", "AVG", 2)
    assert out.tolist() == [-1]  # truncation toward zero
    kind, out, _ = reduce_reference([np.array([True, False]), np.array([True, True])], "bool", "BXOR", 2)
    assert out.tolist() == [False, True]
    bits = bits_of_values(np.array([1.0, -2.5], np.float32), "bfloat16")
    assert bits.tolist() == [0x3F80, 0xC020]
    with pytest.raises(CaseError):
        check_reduction(pack_like(np.array([1.5], np.float32), "float32"),
                        [np.array([1.0], np.float32), np.array([1.0], np.float32)],
                        "float32", "SUM", 2, "self-check")


# ------------------------------------------------- gohccl under its settings
#
# The default settings let the tuner pick one schedule per size; these runs
# force the others: a 64 KiB scratch buffer (every message beyond it streams
# through in chunks), the ring algorithm, and the scalar reduce kernels.

GOHCCL_CONFIGS = {
    "buffsize_64K": {"GOHCCL_BUFFSIZE": "64K"},
    "algo_ring": {"GOHCCL_ALGO": "ring"},
    "simd_scalar": {"GOHCCL_SIMD": "scalar"},
}
CONFIG_WORLD = 3
CONFIG_DTYPES = ["float32", "float64", "float16", "bfloat16", "int8", "int32", "int64", "bool"]
CONFIG_SHAPES = [(0,), (7,), (1023,), (100_003,), (300_007,)]


def config_ops(dtype):
    if dtype in FLOAT_DTYPES:
        return ["SUM", "MAX", "AVG", "PRODUCT"]
    return ["SUM", "MAX", "BXOR"] if dtype != "bool" else ["SUM", "BXOR"]


def config_sweep(ctx):
    out = {}
    for dtype in CONFIG_DTYPES:
        for shape in CONFIG_SHAPES:
            for op in config_ops(dtype):
                out[ar_key(dtype, op, shape)] = attempt(_all_reduce_one, ctx, dtype, op, shape)
            out[mv_key("agit", dtype, shape, "/concat")] = attempt(_mv_agit, ctx, dtype, shape, "concat")
            out[mv_key("rst", dtype, shape, "/SUM")] = attempt(
                _mv_reduce_scatter_tensor, ctx, dtype, shape, "SUM")
            root = ctx.world_size - 1
            out[mv_key("bcast", dtype, shape, f"/root{root}")] = attempt(_mv_broadcast, ctx, dtype, shape, root)
            out[mv_key("reduce", dtype, shape, f"/root{root}")] = attempt(_mv_reduce, ctx, dtype, shape, root)
    return out


def _config_failures(res, world):
    failures = []

    def check(what, fn):
        try:
            fn()
        except AssertionError as exc:
            failures.append(f"{what}: {str(exc).splitlines()[0]}")

    for dtype in CONFIG_DTYPES:
        for shape in CONFIG_SHAPES:
            for op in config_ops(dtype):
                key = ar_key(dtype, op, shape)

                def ar(key=key, dtype=dtype, op=op, shape=shape):
                    packs = case_results(res, key, key)
                    assert_same_on_all_ranks(packs, key)
                    inputs = [gen_values(SEED, r, dtype, shape, kind_for(op), crc(key)) for r in range(world)]
                    check_reduction(packs[0], inputs, dtype, op, world, key)
                check(key, ar)
            key = mv_key("agit", dtype, shape)

            def agit(key=key, dtype=dtype, shape=shape):
                packs = case_results(res, key + "/concat", key)
                assert_same_on_all_ranks(packs, key)
                want = np.concatenate([input_bits(j, dtype, shape, key) for j in range(world)])
                assert_equal_exact(packs[0], want, key)
            check(key, agit)
            key = mv_key("rst", dtype, shape, "/SUM")

            def rst(key=key, dtype=dtype, shape=shape):
                for r, p in enumerate(case_results(res, key, key)):
                    n = shape[0]
                    inputs = [gen_values(SEED, i, dtype, (world * n,), "any", crc(key))[r * n:(r + 1) * n]
                              for i in range(world)]
                    check_reduction(p, inputs, dtype, "SUM", world, f"{key} rank {r}")
            check(key, rst)
            root = world - 1
            key = mv_key("bcast", dtype, shape, f"/root{root}")

            def bcast(key=key, dtype=dtype, shape=shape):
                packs = case_results(res, key, key)
                assert_same_on_all_ranks(packs, key)
                assert_equal_exact(packs[0], input_bits(root, dtype, shape, key), key)
            check(key, bcast)
            key = mv_key("reduce", dtype, shape, f"/root{root}")

            def red(key=key, dtype=dtype, shape=shape):
                p = case_results(res, key, key)[root]
                inputs = [gen_values(SEED, i, dtype, shape, "any", crc(key)) for i in range(world)]
                check_reduction(p, inputs, dtype, "SUM", world, key)
            check(key, red)
    return failures


@pytest.mark.parametrize("config", list(GOHCCL_CONFIGS))
def test_collectives_under_gohccl_settings(backend, config):
    if backend != "gohccl":
        pytest.skip("GOHCCL_* settings configure gohccl only")
    res = launch_cached(f"config-{config}", config_sweep, CONFIG_WORLD, backend,
                        timeout=SWEEP_TIMEOUT, env=GOHCCL_CONFIGS[config])
    failures = _config_failures(res, CONFIG_WORLD)
    assert not failures, (f"{len(failures)} cases failed under {GOHCCL_CONFIGS[config]}:\n"
                          + "\n".join(failures[:25]))
