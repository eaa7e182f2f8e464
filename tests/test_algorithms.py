"""The key collectives under every forced algorithm (GOHCCL_ALGO): ring, tree,
dtree and rhd at worlds 3 and 4, the hierarchical forms with
GOHCCL_RANKS_PER_NODE=2 at world 4, and the allgather's and reduce-scatter's
own forms (recursive-halving reduce-scatter, folded at world 3; hierarchical
allgather and reduce-scatter with every level pair at world 4, and at world
3 as one node of 3 and as 3 nodes of 1).

One launch per world runs every algorithm: GOHCCL_* variables are read (with
C getenv) when a process group is created, so the worker sets them in
os.environ and builds one dist.new_group over all ranks per algorithm. A
malformed GOHCCL_ALGO must fail that creation, which shows the setting
reaches the backend. Each group is also created with GOHCCL_DEBUG=INFO, and
the worker reads back from its own log what the tuner chose for it, so the
tests see that the forced algorithm ran (or fell back, with its warning,
where the collective lacks it). GOHCCL_BUFFSIZE=256K makes the large cases
stream in several 64 KiB segments. Results are compared with a numpy
reference computed here from every rank's regenerated input, and bitwise
across ranks.
"""

import os
import re
import zlib

import numpy as np
import pytest

from harness import (
    CaseError, assert_equal_exact, assert_same_on_all_ranks, attempt, bits_of_values,
    case_results, check_dtype_shape, check_reduction, gen_tensor, gen_values, launch_cached,
    pack, reduce_op,
)

SEED = 2468
SWEEP_TIMEOUT = 150  # harness deadline of one launch (s)
FLAT = ["ring", "tree", "dtree", "rhd", "bruck", "mesh", "mesh.oneshot", "mesh.twophase", "mesh.singlecopy", "mesh.eager"]
HIER = ["level0:ring;level1:tree", "level0:ring;level1:rhd"]
WORLDS = [3, 4]
LAUNCH_ENV = {"GOHCCL_BUFFSIZE": "256K"}

AR_CASES = (
    [("float32", op, n) for op in ("SUM", "MAX", "PRODUCT") for n in (0, 1, 7, 1023, 100_003)]
    + [("float64", "SUM", n) for n in (1, 13, 40_001)]
    + [("bfloat16", "SUM", n) for n in (1, 1023)]
    + [("int32", op, n) for op in ("SUM", "MIN", "BXOR") for n in (1, 7, 30_001)]
    + [("int64", "SUM", n) for n in (0, 5, 1023)]
)
MOVE_SIZES = (1, 7, 1023, 60_001)
# all_gather sizes (elements per rank) and reduce_scatter cases.
AG_SIZES = (0, 1, 7, 1023, 60_001)
RS_CASES = (
    [("int32", "SUM", n) for n in (0, 1, 7, 1023, 60_001)]
    + [("float32", "MAX", n) for n in (7, 1023)]
    + [("float64", "SUM", n) for n in (5, 40_001)]
)

# The allgather's and reduce-scatter's own forms: (world, name, GOHCCL_ALGO,
# GOHCCL_RANKS_PER_NODE). The bare forms above cover level0:ring;level1:rhd
# for both at world 4, and rhd (recursive halving; recursive doubling at
# world 4 only).
VECTOR = [
    (4, "vec-rhd-ring", "allgather=level0:rhd;level1:ring/reducescatter=level0:rhd;level1:ring", "2"),
    (4, "vec-ring-ring/rhd-rhd", "allgather=level0:ring;level1:ring/reducescatter=level0:rhd;level1:rhd", "2"),
    (4, "vec-rhd-rhd/ring-ring", "allgather=level0:rhd;level1:rhd/reducescatter=level0:ring;level1:ring", "2"),
    (3, "vec-3x1", "allgather=level0:ring;level1:ring/reducescatter=level0:ring;level1:rhd", "1"),
    (3, "vec-1x3", "allgather=level0:ring;level1:rhd/reducescatter=level0:ring;level1:ring", "3"),
    # level0 left open: the tuner prices ring, rhd and the mesh engine.
    (4, "vec-open-level0", "allgather=level1:ring/reducescatter=level1:rhd", "2"),
    # level0 on each node's shared-memory engine, one allgather or
    # reduce-scatter per node (MESH_LEVEL0 below); over TCP it cannot run.
    (4, "vec-mesh-level0", "allreduce=level0:mesh;level1:ring/allgather=level0:mesh;level1:ring/"
        "reducescatter=level0:mesh;level1:rhd", "2"),
]
# The configs whose hierarchical level0 runs on the mesh where the ranks
# share memory (not under GOHCCL_TRANSPORT=tcp): the collectives whose
# choice the log names with level0:mesh.
MESH_LEVEL0 = {"vec-mesh-level0": ["allreduce", "allgather", "reducescatter"]}
COLLS = ("allreduce", "allgather", "reducescatter")


def configs(world):
    """configs lists (name, env) of every algorithm run at world."""
    out = [(a, {"GOHCCL_ALGO": a}) for a in FLAT]
    if world == 4:
        out += [(h, {"GOHCCL_ALGO": h, "GOHCCL_RANKS_PER_NODE": "2"}) for h in HIER]
    out += [(name, {"GOHCCL_ALGO": algo, "GOHCCL_RANKS_PER_NODE": k})
            for w, name, algo, k in VECTOR if w == world]
    return out


def expected_choices(world, name):
    """expected_choices maps each of COLLS to what the tuner must run under
    config name: the forced form, "fallback" where the collective lacks it
    (a warning, then the automatic choice), or None where nothing is forced."""
    algo = dict(configs(world))[name]["GOHCCL_ALGO"]
    tcp = os.environ.get("GOHCCL_TRANSPORT", "auto") == "tcp"
    if "=" in algo:
        want = dict.fromkeys(COLLS)
        for item in algo.split("/"):
            coll, form = item.split("=")
            want[coll] = "fallback" if tcp and "mesh" in form else form
        return want
    want = dict.fromkeys(COLLS, algo)
    if algo in ("tree", "dtree") or "level1:tree" in algo:
        want["allgather"] = want["reducescatter"] = "fallback"
    if algo == "rhd" and world & (world - 1):
        want["allgather"] = "fallback"  # recursive doubling needs a power of two
    if algo == "bruck":
        want["allreduce"] = want["reducescatter"] = "fallback"  # an allgather only
    if algo.startswith("mesh"):
        # The shared-memory engine's rows: none over TCP; single copy only
        # for two ranks; no two-phase allgather or reduce-scatter; the
        # eager row is a broadcast's only.
        if tcp or algo in ("mesh.singlecopy", "mesh.eager"):
            return dict.fromkeys(COLLS, "fallback")
        if algo == "mesh.twophase":
            want["allgather"] = want["reducescatter"] = "fallback"
    return want


def crc(key):
    return zlib.crc32(key.encode())


def kind_for(op):
    return {"PRODUCT": "product"}.get(op, "any")


def input_bits(rank, dtype, n, key, kind="any"):
    return bits_of_values(gen_values(SEED, rank, dtype, (n,), kind, crc(key)), dtype)


# ----------------------------------------------------------------- workers

def _all_reduce(ctx, g, dtype, op, n, key):
    import torch.distributed as dist
    t = gen_tensor(SEED, ctx.rank, dtype, (n,), kind_for(op), crc(key))
    dist.all_reduce(t, op=reduce_op(op), group=g)
    return ctx.pack(t)


def _broadcast(ctx, g, n, root, key):
    import torch.distributed as dist
    t = gen_tensor(SEED, ctx.rank, "float32", (n,), "any", crc(key))
    dist.broadcast(t, src=root, group=g)
    return ctx.pack(t)


def _reduce(ctx, g, n, root, key):
    import torch.distributed as dist
    t = gen_tensor(SEED, ctx.rank, "int64", (n,), "any", crc(key))
    dist.reduce(t, dst=root, group=g)
    return pack(t, keep=(ctx.rank == root))


def _all_gather(ctx, g, n, key):
    import torch
    import torch.distributed as dist
    t = gen_tensor(SEED, ctx.rank, "float32", (n,), "any", crc(key))
    out = torch.full((ctx.world_size * n,), -7.0)
    dist.all_gather_into_tensor(out, t, group=g)
    return ctx.pack(out)


def _reduce_scatter(ctx, g, dtype, op, n, key):
    import torch
    import torch.distributed as dist
    t = gen_tensor(SEED, ctx.rank, dtype, (ctx.world_size * n,), "any", crc(key))
    out = torch.full((n,), -7, dtype=getattr(torch, dtype))
    dist.reduce_scatter_tensor(out, t, op=reduce_op(op), group=g)
    return pack(out, keep=True)


_CHOICE = re.compile(r"\] INFO (allreduce|broadcast|reduce|allgather|reducescatter) .* -> (\S+)$")
_FALLBACK = re.compile(r"GOHCCL_ALGO asks for \S+ for (\w+), which cannot run here")


def _choices(ctx, offset):
    """_choices reads this rank's log from offset on (the harness sends the
    worker's stderr there) and returns the tuner's choices and fallbacks in
    it, and the new offset."""
    path = os.path.join(ctx.workdir, f"log-{ctx.rank}.txt")
    with open(path, "rb") as f:
        f.seek(offset)
        text = f.read().decode("utf-8", "replace")
    forced, chosen, fallbacks, mesh_level0 = {}, {}, set(), set()
    for line in text.splitlines():
        m = _CHOICE.search(line)
        if m:
            # The choice is the row's name, then "/" and the segment of a
            # schedule that streams: the name is what GOHCCL_ALGO takes.
            name = m.group(2).split("/")[0]
            (forced if "(GOHCCL_ALGO allows" in line else chosen).setdefault(m.group(1), set()).add(name)
            if name.startswith("level0:mesh;"):
                mesh_level0.add(m.group(1))
        m = _FALLBACK.search(line)
        if m:
            fallbacks.add(m.group(1))
    out = {"forced": {k: sorted(v) for k, v in forced.items()},
           "chosen": {k: sorted(v) for k, v in chosen.items()}, "fallbacks": sorted(fallbacks),
           "mesh_level0": sorted(mesh_level0)}
    return out, offset + len(text.encode("utf-8", "replace"))


def _bad_algo_refused(ctx):
    import os
    import torch.distributed as dist
    os.environ["GOHCCL_ALGO"] = "no-such-algorithm"
    try:
        dist.new_group(list(range(ctx.world_size)))
    except Exception as exc:  # noqa: BLE001 - the refusal is the result
        return {"raised": f"{type(exc).__name__}: {exc}"}
    finally:
        os.environ.pop("GOHCCL_ALGO", None)
    return {"raised": None}


def algorithms_sweep(ctx):
    import os
    import torch.distributed as dist
    out = {}
    offset = 0
    for name, env in configs(ctx.world_size):
        env = dict(env, GOHCCL_DEBUG="INFO")
        _, offset = _choices(ctx, offset)
        os.environ.update(env)
        try:
            g = dist.new_group(list(range(ctx.world_size)))
        finally:
            for k in env:
                os.environ.pop(k, None)
        for dtype, op, n in AR_CASES:
            key = f"{name}/ar/{dtype}/{op}/{n}"
            out[key] = attempt(_all_reduce, ctx, g, dtype, op, n, key)
        for n in MOVE_SIZES:
            for root in (0, ctx.world_size - 1):
                key = f"{name}/bcast/{n}/root{root}"
                out[key] = attempt(_broadcast, ctx, g, n, root, key)
            key = f"{name}/reduce/{n}/root1"
            out[key] = attempt(_reduce, ctx, g, n, 1, key)
        for n in AG_SIZES:
            key = f"{name}/ag/{n}"
            out[key] = attempt(_all_gather, ctx, g, n, key)
        for dtype, op, n in RS_CASES:
            key = f"{name}/rs/{dtype}/{op}/{n}"
            out[key] = attempt(_reduce_scatter, ctx, g, dtype, op, n, key)
        dist.barrier(group=g)
        out[f"{name}/choices"], offset = _choices(ctx, offset)
    out["bad_algo"] = _bad_algo_refused(ctx)
    return out


# ------------------------------------------------------------------- tests

def sweep(backend, world):
    if backend != "gohccl":
        pytest.skip("GOHCCL_ALGO configures gohccl only")
    return launch_cached("algorithms", algorithms_sweep, world, backend,
                         timeout=SWEEP_TIMEOUT, env=LAUNCH_ENV)


def params():
    return [pytest.param(w, name, id=f"world{w}-{name}") for w in WORLDS for name, _ in configs(w)]


def collect(check):
    """collect runs every check and fails once, listing each failed case."""
    failures = []
    for what, fn in check:
        try:
            fn()
        except AssertionError as exc:
            failures.append(f"{what}: {str(exc).splitlines()[0]}")
    assert not failures, f"{len(failures)} cases failed:\n" + "\n".join(failures[:25])


@pytest.mark.timeout(SWEEP_TIMEOUT + 30)
@pytest.mark.parametrize("world,algo", params())
def test_all_reduce(backend, world, algo):
    res = sweep(backend, world)
    checks = []
    for dtype, op, n in AR_CASES:
        key = f"{algo}/ar/{dtype}/{op}/{n}"

        def one(key=key, dtype=dtype, op=op, n=n):
            packs = case_results(res, key, key)
            for p in packs:
                check_dtype_shape(p, dtype, (n,), key)
            assert_same_on_all_ranks(packs, key)
            inputs = [gen_values(SEED, r, dtype, (n,), kind_for(op), crc(key)) for r in range(world)]
            check_reduction(packs[0], inputs, dtype, op, world, key)
        checks.append((key, one))
    collect(checks)


@pytest.mark.timeout(SWEEP_TIMEOUT + 30)
@pytest.mark.parametrize("world,algo", params())
def test_movement(backend, world, algo):
    """broadcast and reduce under the algorithm."""
    res = sweep(backend, world)
    checks = []
    for n in MOVE_SIZES:
        for root in (0, world - 1):
            key = f"{algo}/bcast/{n}/root{root}"

            def bcast(key=key, n=n, root=root):
                packs = case_results(res, key, key)
                assert_same_on_all_ranks(packs, key)
                assert_equal_exact(packs[0], input_bits(root, "float32", n, key), key)
            checks.append((key, bcast))
        key = f"{algo}/reduce/{n}/root1"

        def red(key=key, n=n):
            p = case_results(res, key, key)[1]
            inputs = [gen_values(SEED, r, "int64", (n,), "any", crc(key)) for r in range(world)]
            check_reduction(p, inputs, "int64", "SUM", world, key)
        checks.append((key, red))
    collect(checks)


@pytest.mark.timeout(SWEEP_TIMEOUT + 30)
@pytest.mark.parametrize("world,algo", params())
def test_all_gather_reduce_scatter(backend, world, algo):
    """all_gather and reduce_scatter under the algorithm, zero-size included."""
    res = sweep(backend, world)
    checks = []
    for n in AG_SIZES:
        key = f"{algo}/ag/{n}"

        def ag(key=key, n=n):
            packs = case_results(res, key, key)
            assert_same_on_all_ranks(packs, key)
            want = np.concatenate([input_bits(r, "float32", n, key) for r in range(world)])
            assert_equal_exact(packs[0], want, key)
        checks.append((key, ag))
    for dtype, op, n in RS_CASES:
        key = f"{algo}/rs/{dtype}/{op}/{n}"

        def rs(key=key, dtype=dtype, op=op, n=n):
            for r, p in enumerate(case_results(res, key, key)):
                inputs = [gen_values(SEED, i, dtype, (world * n,), "any", crc(key))[r * n:(r + 1) * n]
                          for i in range(world)]
                check_reduction(p, inputs, dtype, op, world, f"{key} rank {r}")
        checks.append((key, rs))
    collect(checks)


@pytest.mark.timeout(SWEEP_TIMEOUT + 30)
@pytest.mark.parametrize("world,algo", params())
def test_forced_choice(backend, world, algo):
    """Every rank's tuner ran what GOHCCL_ALGO forces for all_reduce,
    all_gather and reduce_scatter, and fell back (with its warning) exactly
    where the collective lacks the form."""
    res = sweep(backend, world)
    for rank, r in enumerate(res):
        got = r[f"{algo}/choices"]
        for coll, want in expected_choices(world, algo).items():
            forced = got["forced"].get(coll, [])
            what = f"rank {rank} {coll} under GOHCCL_ALGO of {algo!r}: log says {got}"
            if want == "fallback":
                assert coll in got["fallbacks"] and not forced, what
            elif want is None:
                assert coll not in got["fallbacks"] and not forced, what
            elif want.startswith("level1:"):
                # level0 open: the log names the tuner's level0 with it,
                # which may differ from one size class to the next.
                assert coll not in got["fallbacks"] and forced, what
                assert all(f.startswith("level0:") and f.endswith(";" + want) for f in forced), what
            elif want == "mesh":
                # The family: the tuner picks one of its rows.
                assert coll not in got["fallbacks"] and forced and all(f.startswith("mesh.") for f in forced), what
            else:
                assert coll not in got["fallbacks"] and forced == [want], what
        if algo in MESH_LEVEL0 and os.environ.get("GOHCCL_TRANSPORT", "auto") != "tcp":
            for coll in MESH_LEVEL0[algo]:
                assert coll in got["mesh_level0"], f"rank {rank}: {coll}'s level0 not on the mesh: {got}"


@pytest.mark.timeout(SWEEP_TIMEOUT + 30)
@pytest.mark.parametrize("world", WORLDS)
def test_malformed_algo_refused(backend, world):
    """A malformed GOHCCL_ALGO fails group creation: the setting reaches the
    backend at creation, so the forced runs above really are forced."""
    res = sweep(backend, world)
    for rank, r in enumerate(res):
        raised = r["bad_algo"]["raised"]
        if not raised or "GOHCCL_ALGO" not in raised:
            raise CaseError(f"rank {rank}: new_group with GOHCCL_ALGO=no-such-algorithm gave {raised!r}")
