"""Subgroups: new_group with the full group, singletons and non-contiguous
subsets; new_subgroups and new_subgroups_by_enumeration; subgroup ops
interleaved with world ops; ranks outside a group do not take part."""

import pytest

from harness import WORLD_SIZES, attempt, case_results, launch_cached

TIMEOUT = 240
pytestmark = pytest.mark.timeout(TIMEOUT + 60)
# World 1 adds nothing here that test_collectives does not cover: every group
# of one rank is the singleton case, which worlds 2-4 test too.
GROUP_WORLDS = [w for w in WORLD_SIZES if w > 1]
worlds = pytest.mark.parametrize("world", GROUP_WORLDS, ids=lambda w: f"w{w}")


def subset_groups(ws):
    """The non-contiguous subsets built at each world size."""
    if ws == 3:
        return [[0, 2]]
    if ws == 4:
        return [[0, 2], [1, 3], [0, 1, 3]]
    return []


def subgroup_size(ws):
    return 2 if ws in (2, 4) else 1 if ws == 1 else 3


def enumeration(ws):
    return [[0, 3], [1, 2]] if ws == 4 else None


def value(rank, tag):
    return float(100 * tag + rank + 1)


def _full(ctx, g):
    import torch
    import torch.distributed as dist
    t = torch.full((4,), value(ctx.rank, 1))
    dist.all_reduce(t, group=g)
    return {"sum": t.tolist(), "rank": dist.get_rank(g), "size": dist.get_world_size(g),
            "ranks": dist.get_process_group_ranks(g)}


def _singletons(ctx, singles):
    import torch
    import torch.distributed as dist
    ws, r = ctx.world_size, ctx.rank
    mine = singles[r]
    t = torch.full((3,), value(r, 2))
    dist.all_reduce(t, group=mine)
    dist.broadcast(t, src=r, group=mine)
    outs = [torch.zeros(3)]
    dist.all_gather(outs, t, group=mine)
    res = {"allreduce": t.tolist(), "gathered": outs[0].tolist(), "rank": dist.get_rank(mine)}
    if ws > 1:
        other = singles[(r + 1) % ws]
        u = torch.full((3,), 7.0)
        ret = dist.all_reduce(u, group=other)
        res["nonmember_ret"] = repr(ret)
        res["nonmember_tensor"] = u.tolist()
        res["nonmember_rank"] = dist.get_rank(other)
    return res


def _subset(ctx, g, ranks):
    import torch
    import torch.distributed as dist
    r = ctx.rank
    if r not in ranks:
        u = torch.full((2,), -1.0)
        ret = dist.all_reduce(u, group=g)
        return {"member": False, "ret": repr(ret), "tensor": u.tolist(), "rank": dist.get_rank(g)}
    n = len(ranks)
    res = {"member": True, "rank": dist.get_rank(g), "size": dist.get_world_size(g)}
    t = torch.full((5,), value(r, 3))
    dist.all_reduce(t, group=g)
    res["allreduce"] = t.tolist()
    b = torch.full((2,), value(r, 4))
    dist.broadcast(b, src=ranks[-1], group=g)  # src is a global rank
    res["bcast_global"] = b.tolist()
    b = torch.full((2,), value(r, 5))
    dist.broadcast(b, group=g, group_src=0)
    res["bcast_group_src"] = b.tolist()
    outs = [torch.zeros(2, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(outs, torch.full((2,), r, dtype=torch.int64), group=g)
    res["all_gather"] = [o.tolist() for o in outs]
    inp = torch.arange(3 * n, dtype=torch.float64) * (r + 1)
    out = torch.zeros(3, dtype=torch.float64)
    dist.reduce_scatter_tensor(out, inp, group=g)
    res["reduce_scatter"] = out.tolist()
    red = torch.full((2,), value(r, 6))
    dist.reduce(red, dst=ranks[0], group=g)
    if r == ranks[0]:
        res["reduce"] = red.tolist()
    dist.barrier(group=g)
    return res


def _subgroups(ctx, size):
    import torch
    import torch.distributed as dist
    cur, subs = dist.new_subgroups(group_size=size)
    t = torch.full((3,), value(ctx.rank, 7))
    dist.all_reduce(t, group=cur)
    return {"ranks": dist.get_process_group_ranks(cur), "allreduce": t.tolist(),
            "count": len(subs)}


def _enumerated(ctx, spec):
    import torch
    import torch.distributed as dist
    cur, subs = dist.new_subgroups_by_enumeration(spec)
    t = torch.full((3,), value(ctx.rank, 8))
    dist.all_reduce(t, group=cur)
    return {"ranks": dist.get_process_group_ranks(cur), "allreduce": t.tolist()}


def _interleaved(ctx, subsets, cur):
    """World ops, subset ops and subgroup ops in one stream, sync and async.
    Each group keeps its own order; non-members skip subset ops entirely."""
    import torch
    import torch.distributed as dist
    ws, r = ctx.world_size, ctx.rank
    log = []
    for i in range(5):
        a = torch.full((4,), value(r, 10 + i))
        dist.all_reduce(a)
        log.append(("world", i, a.tolist()))
        for k, (g, ranks) in enumerate(subsets):
            if r in ranks:
                s = torch.full((3,), value(r, 20 + i + k))
                work = dist.all_reduce(s, group=g, async_op=True)
                w2 = torch.full((2,), value(r, 30 + i))
                world_work = dist.all_reduce(w2, async_op=True)
                work.wait()
                world_work.wait()
                log.append((f"subset{k}", i, s.tolist()))
                log.append(("world_async", i, w2.tolist()))
            else:
                w2 = torch.full((2,), value(r, 30 + i))
                dist.all_reduce(w2)
                log.append(("world_async", i, w2.tolist()))
        b = torch.full((2,), value(r, 40 + i))
        dist.broadcast(b, src=i % ws)
        log.append(("bcast", i, b.tolist()))
        c = torch.full((2,), value(r, 50 + i))
        dist.all_reduce(c, group=cur)
        log.append(("subgroup", i, c.tolist()))
    return log


def groups_sweep(ctx):
    import torch.distributed as dist
    ws = ctx.world_size
    out = {}
    g_full = dist.new_group(list(range(ws)))
    out["full"] = attempt(_full, ctx, g_full)
    singles = [dist.new_group([k]) for k in range(ws)]
    out["singletons"] = attempt(_singletons, ctx, singles)
    subsets = [(dist.new_group(ranks), ranks) for ranks in subset_groups(ws)]
    for k, (g, ranks) in enumerate(subsets):
        out[f"subset{k}"] = attempt(_subset, ctx, g, ranks)
    out["subgroups"] = attempt(_subgroups, ctx, subgroup_size(ws))
    if enumeration(ws):
        out["enumerated"] = attempt(_enumerated, ctx, enumeration(ws))
    cur, _ = dist.new_subgroups(group_size=subgroup_size(ws))
    out["interleaved"] = attempt(_interleaved, ctx, subsets, cur)
    return out


def results(backend, world):
    return launch_cached("groups", groups_sweep, world, backend, timeout=TIMEOUT)


def expected_sum(ranks, tag):
    return sum(value(r, tag) for r in ranks)


@worlds
def test_full_group(backend, world):
    for r, o in enumerate(case_results(results(backend, world), "full", "full group")):
        assert o["sum"] == [expected_sum(range(world), 1)] * 4, f"rank {r}: {o}"
        assert (o["rank"], o["size"], o["ranks"]) == (r, world, list(range(world))), f"rank {r}: {o}"


@worlds
def test_singleton_groups(backend, world):
    for r, o in enumerate(case_results(results(backend, world), "singletons", "singletons")):
        assert o["allreduce"] == [value(r, 2)] * 3, f"rank {r}: all_reduce on its own group: {o}"
        assert o["gathered"] == [value(r, 2)] * 3, f"rank {r}: all_gather on its own group: {o}"
        assert o["rank"] == 0, f"rank {r}: group rank in its singleton: {o['rank']}"
        if world > 1:
            assert o["nonmember_ret"] == "None", f"rank {r}: non-member all_reduce returned {o['nonmember_ret']}"
            assert o["nonmember_tensor"] == [7.0] * 3, f"rank {r}: non-member tensor changed"
            assert o["nonmember_rank"] == -1, f"rank {r}: get_rank of a foreign group"


@worlds
def test_noncontiguous_subsets(backend, world):
    subsets = subset_groups(world)
    if not subsets:
        pytest.skip(f"no non-contiguous subset of {world} ranks")
    res = results(backend, world)
    for k, ranks in enumerate(subsets):
        n = len(ranks)
        for r, o in enumerate(case_results(res, f"subset{k}", f"subset {ranks}")):
            what = f"group {ranks}, rank {r}"
            if r not in ranks:
                assert not o["member"] and o["ret"] == "None" and o["tensor"] == [-1.0] * 2, (
                    f"{what}: non-member took part: {o}")
                assert o["rank"] == -1, f"{what}: get_rank {o['rank']}"
                continue
            assert (o["rank"], o["size"]) == (ranks.index(r), n), f"{what}: rank/size {o}"
            assert o["allreduce"] == [expected_sum(ranks, 3)] * 5, f"{what}: all_reduce {o['allreduce']}"
            assert o["bcast_global"] == [value(ranks[-1], 4)] * 2, f"{what}: broadcast src={ranks[-1]}"
            assert o["bcast_group_src"] == [value(ranks[0], 5)] * 2, f"{what}: broadcast group_src=0"
            assert o["all_gather"] == [[q, q] for q in ranks], f"{what}: all_gather {o['all_gather']}"
            full = [sum(float(i) * (q + 1) for q in ranks) for i in range(3 * n)]
            gi = ranks.index(r)
            assert o["reduce_scatter"] == full[3 * gi:3 * gi + 3], f"{what}: reduce_scatter"
            if r == ranks[0]:
                assert o["reduce"] == [expected_sum(ranks, 6)] * 2, f"{what}: reduce"


def subgroup_of(rank, world):
    size = subgroup_size(world)
    start = rank // size * size
    return list(range(start, start + size))


@worlds
def test_new_subgroups(backend, world):
    for r, o in enumerate(case_results(results(backend, world), "subgroups", "new_subgroups")):
        ranks = subgroup_of(r, world)
        assert o["ranks"] == ranks, f"rank {r}: subgroup ranks {o['ranks']}"
        assert o["count"] == world // subgroup_size(world)
        assert o["allreduce"] == [expected_sum(ranks, 7)] * 3, f"rank {r}: {o['allreduce']}"


def test_new_subgroups_by_enumeration(backend):
    world = 4
    spec = enumeration(world)
    for r, o in enumerate(case_results(results(backend, world), "enumerated", "enumerated")):
        ranks = next(s for s in spec if r in s)
        assert o["ranks"] == ranks, f"rank {r}: {o['ranks']}"
        assert o["allreduce"] == [expected_sum(ranks, 8)] * 3, f"rank {r}: {o['allreduce']}"


@worlds
def test_interleaved_world_and_subgroup_ops(backend, world):
    subsets = subset_groups(world)
    for r, log in enumerate(case_results(results(backend, world), "interleaved", "interleaved")):
        want = []
        for i in range(5):
            want.append(("world", i, [expected_sum(range(world), 10 + i)] * 4))
            for k, ranks in enumerate(subsets):
                if r in ranks:
                    want.append((f"subset{k}", i, [expected_sum(ranks, 20 + i + k)] * 3))
                want.append(("world_async", i, [expected_sum(range(world), 30 + i)] * 2))
            want.append(("bcast", i, [value(i % world, 40 + i)] * 2))
            want.append(("subgroup", i, [expected_sum(subgroup_of(r, world), 50 + i)] * 2))
        for got, exp in zip(log, want):
            assert tuple(got) == exp, f"rank {r}: got {got}, expected {exp}"
        assert len(log) == len(want), f"rank {r}: {len(log)} entries, expected {len(want)}"
