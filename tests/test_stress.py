"""Stress: a long randomized sequence of mixed operations at world 3 and 4,
every result checked against numpy.

A plan is a list of operations drawn from a fixed seed, the same on every
rank and in the parent: the primitive (every collective, send/recv), the
group it runs on (the world or one of two overlapping subgroups made with
new_group), dtype, reduce op, size (0, 1, odd, a few thousand), root or
peers, and whether it is issued async_op=True (waited later, at a drain
point the plan also fixes) or synchronously. Each rank runs the plan,
skipping the operations of groups it is not in, and returns every result.
The parent regenerates every rank's inputs from (seed, rank, op index) and
computes each expected result with numpy (harness.reduce_reference for the
reductions, exact storage for data movement).

Terms: op index `i` is an operation's place in the plan; `members` are the
global ranks of its group, in group-rank order; `q` is a rank's group rank.

The default run is STRESS_OPS operations per world. GOHCCL_SOAK=1 runs a
soak of SOAK_OPS per world instead; GOHCCL_SOAK=<n> runs n; GOHCCL_SOAK_SEED
picks another plan.
"""

import os
import random

import numpy as np
import pytest

from harness import (
    FLOAT_DTYPES, INT_DTYPES, assert_equal_exact, bits_of_values, check_reduction,
    gen_values, launch, reduce_op, skip_reason, CaseError,
)

SEED = int(os.environ.get("GOHCCL_SOAK_SEED", "20240607"))
# Chosen for well under a minute per world on a loaded 2-core machine
# (measured: about 15 s per world, start-up included, for 1500 operations).
STRESS_OPS = 1500
SOAK_OPS = 50_000


def _soak_ops():
    v = os.environ.get("GOHCCL_SOAK", "")
    if not v or v == "0":
        return None
    n = int(v)
    return SOAK_OPS if n == 1 else n


N_OPS = _soak_ops() or STRESS_OPS
# Harness deadline: start-up plus a generous 40 ms per operation.
LAUNCH_TIMEOUT = 90 + N_OPS * 0.04
pytestmark = pytest.mark.timeout(int(2 * LAUNCH_TIMEOUT) + 60)

STRESS_WORLDS = [3, 4]
DTYPES = list(FLOAT_DTYPES) + list(INT_DTYPES) + ["bool"]
KINDS = ["all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
         "reduce_scatter", "reduce_scatter_tensor", "gather", "scatter", "all_to_all",
         "all_to_all_single", "barrier", "send_recv"]
SIZES = [0, 1, 2, 3, 5, 7, 17, 33, 64, 129, 1000, 4099]
SIZE_WEIGHTS = [4, 6, 3, 3, 3, 5, 4, 4, 3, 3, 2, 1]
PREMUL_FACTOR = 3.0


def members_of(world: int) -> dict:
    """The groups: the world and two overlapping subgroups."""
    if world == 3:
        return {"world": [0, 1, 2], "a": [0, 1], "b": [1, 2]}
    return {"world": list(range(world)), "a": [0, 1, 2], "b": [1, 2, 3]}


def ops_for(dtype: str) -> list:
    if dtype in FLOAT_DTYPES:
        return ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "PREMUL_SUM"]
    if dtype == "bool":
        return ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]
    return ["SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR"]


def value_kind(op) -> str:
    """Input range for op (harness.gen_values): AVG sums must not wrap,
    products stay near 1."""
    return {"AVG": "small", "PRODUCT": "product"}.get(op, "any")


def a2a_split(i: int, s: int, d: int) -> int:
    """Rows group rank s sends to group rank d in operation i: uneven, some 0."""
    return (i + 3 * s + d) % 4


def make_plan(seed: int, world: int, n_ops: int) -> list:
    """The plan: random operations, among which, at random places, one of
    every (primitive, group) and one all_reduce of every (dtype, op), so any
    plan of a few hundred operations or more covers them all."""
    rng = random.Random(seed * 1009 + world)
    groups = members_of(world)
    forced = [(k, g, None, None) for k in KINDS for g in groups]
    forced += [("all_reduce", None, d, o) for d in DTYPES for o in ops_for(d)]
    places = dict(zip(rng.sample(range(n_ops), min(n_ops, len(forced))), forced))
    plan = []
    for i in range(n_ops):
        kind, group, dtype, op = places.get(i, (None, None, None, None))
        kind = kind or rng.choice(KINDS)
        group = group or rng.choice(["world", "world", "a", "b"])
        m = len(groups[group])
        dtype = dtype or rng.choice(DTYPES)
        spec = {
            "i": i, "kind": kind, "group": group, "dtype": dtype,
            "n": rng.choices(SIZES, SIZE_WEIGHTS)[0],
            "op": op or rng.choice(ops_for(dtype)),
            "root": rng.randrange(m),
            "async": rng.random() < 0.4,
            # Drain point: wait for every async op issued so far.
            "drain": rng.random() < 0.25,
        }
        if kind in ("reduce", "reduce_scatter", "reduce_scatter_tensor") and spec["op"] == "PREMUL_SUM":
            spec["op"] = "SUM"  # torch offers PREMUL_SUM for all_reduce's NCCL-style use only
        if kind == "send_recv":
            s = rng.randrange(m)
            spec["src"], spec["dst"] = s, (s + 1 + rng.randrange(m - 1)) % m
            spec["tag"] = rng.randrange(4)
        plan.append(spec)
    return plan


def inputs_of(seed, spec, rank, q, m):
    """Every input tensor's values that global rank `rank` (group rank q)
    contributes to operation spec, as numpy arrays keyed by role."""
    i, dtype, n = spec["i"], spec["dtype"], spec["n"]
    kind = value_kind(spec["op"]) if spec["kind"] in (
        "all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor") else "any"
    g = lambda shape, j=0: gen_values(seed, rank, dtype, shape, kind, i * 64 + j)  # noqa: E731
    k = spec["kind"]
    if k in ("all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor", "gather"):
        return {"x": g((n,))}
    if k == "reduce_scatter":
        return {"parts": [g((n,), j) for j in range(m)]}
    if k == "reduce_scatter_tensor":
        return {"x": g((m * n,))}
    if k == "scatter":
        return {"parts": [g((n,), j) for j in range(m)]} if q == spec["root"] else {}
    if k == "all_to_all":
        return {"parts": [g((a2a_split(i, q, j),), j) for j in range(m)]}
    if k == "all_to_all_single":
        return {"x": g((sum(a2a_split(i, q, j) for j in range(m)),))}
    if k == "send_recv":
        return {"x": g((n,))} if q == spec["src"] else {}
    return {}


# ------------------------------------------------------------- worker side

def _stress(ctx, seed, n_ops):
    import torch
    import torch.distributed as dist
    from harness import fill_garbage, make_tensor, pack
    ws, r = ctx.world_size, ctx.rank
    groups = members_of(ws)
    handles = {"world": None}
    for name in ("a", "b"):
        handles[name] = dist.new_group(groups[name])  # every rank takes part in creating each
    tdt = lambda d: getattr(torch, d)  # noqa: E731

    def empty(shape, dtype, salt=0):
        return fill_garbage(torch.empty(shape, dtype=tdt(dtype)), salt)

    results = {}
    pending = []  # (work, finish)
    issued = 0
    for spec in make_plan(seed, ws, n_ops):
        members = groups[spec["group"]]
        if r not in members:
            continue
        issued += 1
        i, k, dtype, n = spec["i"], spec["kind"], spec["dtype"], spec["n"]
        m, q, g = len(members), members.index(r), handles[spec["group"]]
        root = members[spec["root"]]
        asy = spec["async"]
        ins = inputs_of(seed, spec, r, q, m)
        t = lambda a: make_tensor(a, dtype)  # noqa: E731
        finish = None
        work = None
        if k == "all_reduce":
            x = t(ins["x"])
            work = dist.all_reduce(x, op=reduce_op(spec["op"], PREMUL_FACTOR), group=g, async_op=asy)
            finish = lambda x=x: pack(x)  # noqa: E731
        elif k == "broadcast":
            x = t(ins["x"])
            work = dist.broadcast(x, src=root, group=g, async_op=asy)
            finish = lambda x=x: pack(x)  # noqa: E731
        elif k == "reduce":
            x = t(ins["x"])
            work = dist.reduce(x, dst=root, op=reduce_op(spec["op"]), group=g, async_op=asy)
            finish = (lambda x=x: pack(x)) if r == root else (lambda: None)
        elif k == "all_gather":
            outs = [empty((n,), dtype, j) for j in range(m)]
            work = dist.all_gather(outs, t(ins["x"]), group=g, async_op=asy)
            finish = lambda outs=outs: [pack(o) for o in outs]  # noqa: E731
        elif k == "all_gather_into_tensor":
            out = empty((m * n,), dtype)
            work = dist.all_gather_into_tensor(out, t(ins["x"]), group=g, async_op=asy)
            finish = lambda out=out: pack(out)  # noqa: E731
        elif k == "reduce_scatter":
            out = empty((n,), dtype)
            work = dist.reduce_scatter(out, [t(p) for p in ins["parts"]], op=reduce_op(spec["op"]),
                                       group=g, async_op=asy)
            finish = lambda out=out: pack(out)  # noqa: E731
        elif k == "reduce_scatter_tensor":
            out = empty((n,), dtype)
            work = dist.reduce_scatter_tensor(out, t(ins["x"]), op=reduce_op(spec["op"]), group=g,
                                              async_op=asy)
            finish = lambda out=out: pack(out)  # noqa: E731
        elif k == "gather":
            gl = [empty((n,), dtype, j) for j in range(m)] if r == root else None
            work = dist.gather(t(ins["x"]), gather_list=gl, dst=root, group=g, async_op=asy)
            finish = (lambda gl=gl: [pack(o) for o in gl]) if gl is not None else (lambda: None)
        elif k == "scatter":
            sl = [t(p) for p in ins["parts"]] if r == root else None
            out = empty((n,), dtype)
            work = dist.scatter(out, scatter_list=sl, src=root, group=g, async_op=asy)
            finish = lambda out=out: pack(out)  # noqa: E731
        elif k == "all_to_all":
            outs = [empty((a2a_split(i, j, q),), dtype, j) for j in range(m)]
            work = dist.all_to_all(outs, [t(p) for p in ins["parts"]], group=g, async_op=asy)
            finish = lambda outs=outs: [pack(o) for o in outs]  # noqa: E731
        elif k == "all_to_all_single":
            in_splits = [a2a_split(i, q, j) for j in range(m)]
            out_splits = [a2a_split(i, j, q) for j in range(m)]
            out = empty((sum(out_splits),), dtype)
            work = dist.all_to_all_single(out, t(ins["x"]), output_split_sizes=out_splits,
                                          input_split_sizes=in_splits, group=g, async_op=asy)
            finish = lambda out=out: pack(out)  # noqa: E731
        elif k == "barrier":
            work = dist.barrier(group=g, async_op=asy)
            finish = lambda: True  # noqa: E731
        elif k == "send_recv":
            src, dst = members[spec["src"]], members[spec["dst"]]
            if r == src:
                x = t(ins["x"])
                if asy:
                    work = dist.isend(x, dst=dst, group=g, tag=spec["tag"])
                else:
                    dist.send(x, dst=dst, group=g, tag=spec["tag"])
                finish = lambda: None  # noqa: E731
            elif r == dst:
                out = empty((n,), dtype)
                if asy:
                    work = dist.irecv(out, src=src, group=g, tag=spec["tag"])
                else:
                    dist.recv(out, src=src, group=g, tag=spec["tag"])
                finish = lambda out=out: pack(out)  # noqa: E731
            else:
                issued -= 1
                continue
        if asy and work is not None:
            pending.append((i, work, finish))
        else:
            results[i] = finish()
        if spec["drain"]:
            for j, w, f in pending:
                w.wait()
                results[j] = f()
            pending.clear()
    for j, w, f in pending:
        w.wait()
        results[j] = f()
    return {"issued": issued, "results": results}


# ------------------------------------------------------------- parent side

def expected_failures(seed, world, per_rank) -> list:
    """Checks every result of every rank against numpy; returns the failures."""
    groups = members_of(world)
    failures = []
    plan = make_plan(seed, world, N_OPS)
    for spec in plan:
        members = groups[spec["group"]]
        m = len(members)
        i, k, dtype, n, op = spec["i"], spec["kind"], spec["dtype"], spec["n"], spec["op"]
        root_q = spec["root"]
        ins = [inputs_of(seed, spec, g, q, m) for q, g in enumerate(members)]
        bits = lambda a: bits_of_values(a, dtype)  # noqa: E731
        for q, g in enumerate(members):
            what = f"op {i} ({k} {dtype} n={n} op={op} group {spec['group']}={members} " \
                   f"root q{root_q} async={spec['async']}), rank {g}"
            if k == "send_recv" and q != spec["dst"]:
                continue
            if k in ("reduce", "gather") and q != root_q:
                continue
            got = per_rank[g]["results"].get(i, "missing")
            try:
                if isinstance(got, str):
                    raise CaseError(f"{what}: no result")
                if k == "all_reduce":
                    check_reduction(got, [x["x"] for x in ins], dtype, op, m, what, PREMUL_FACTOR)
                elif k == "reduce":
                    check_reduction(got, [x["x"] for x in ins], dtype, op, m, what)
                elif k == "broadcast":
                    assert_equal_exact(got, bits(ins[root_q]["x"]), what)
                elif k in ("all_gather", "gather"):
                    assert len(got) == m, f"{what}: {len(got)} tensors"
                    for j in range(m):
                        assert_equal_exact(got[j], bits(ins[j]["x"]), f"{what}, slot {j}")
                elif k == "all_gather_into_tensor":
                    assert_equal_exact(got, bits(np.concatenate([x["x"] for x in ins])), what)
                elif k == "reduce_scatter":
                    check_reduction(got, [x["parts"][q] for x in ins], dtype, op, m, what)
                elif k == "reduce_scatter_tensor":
                    check_reduction(got, [x["x"][q * n:(q + 1) * n] for x in ins], dtype, op, m, what)
                elif k == "scatter":
                    assert_equal_exact(got, bits(ins[root_q]["parts"][q]), what)
                elif k == "all_to_all":
                    assert len(got) == m, f"{what}: {len(got)} tensors"
                    for j in range(m):
                        assert_equal_exact(got[j], bits(ins[j]["parts"][q]), f"{what}, from {j}")
                elif k == "all_to_all_single":
                    parts = []
                    for j in range(m):
                        off = sum(a2a_split(i, j, d) for d in range(q))
                        parts.append(ins[j]["x"][off:off + a2a_split(i, j, q)])
                    assert_equal_exact(got, bits(np.concatenate(parts)), what)
                elif k == "barrier":
                    assert got is True, f"{what}: {got!r}"
                elif k == "send_recv":
                    assert_equal_exact(got, bits(ins[spec["src"]]["x"]), what)
            except (CaseError, AssertionError) as exc:
                failures.append(str(exc))
    return failures


def test_plan_covers_everything():
    """The default plan (what one run checks) includes every primitive on
    every group, every dtype, every reduce op, size 0, async and sync."""
    for world in STRESS_WORLDS:
        plan = make_plan(SEED, world, STRESS_OPS)
        assert {(s["kind"], s["group"]) for s in plan} == {(k, g) for k in KINDS for g in members_of(world)}
        assert {s["dtype"] for s in plan} == set(DTYPES)
        red = [s for s in plan if s["kind"] in ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor")]
        assert {(s["dtype"], s["op"]) for s in red if s["kind"] == "all_reduce"} == \
            {(d, o) for d in DTYPES for o in ops_for(d)}
        assert {s["n"] for s in plan} == set(SIZES)
        assert {s["async"] for s in plan} == {True, False}
        assert any(s["kind"] == "send_recv" and s["async"] for s in plan)


@pytest.mark.parametrize("world", STRESS_WORLDS, ids=lambda w: f"w{w}")
def test_stress_mixed_ops(backend, world):
    if skip_reason(backend, dtype="int16") or skip_reason(backend, op="PREMUL_SUM"):
        pytest.skip("the plan uses dtypes and ops this backend lacks (see harness.skip_reason)")
    per_rank = launch(_stress, world, backend, args=(SEED, N_OPS), timeout=LAUNCH_TIMEOUT,
                      pg_timeout=120.0)
    issued = sum(p["issued"] for p in per_rank)
    assert issued > N_OPS, f"only {issued} operations issued over {world} ranks"
    failures = expected_failures(SEED, world, per_rank)
    assert not failures, (f"{len(failures)} wrong results of {N_OPS} operations (seed {SEED}); "
                          "first ones:\n" + "\n".join(failures[:20]))
