"""Point-to-point: send/recv, isend/irecv with tags, receive from any source,
batch_isend_irecv, zero-element and large messages, p2p inside a subgroup."""

import zlib

import numpy as np
import pytest

from harness import (
    DTYPES, assert_equal_exact, attempt, bits_of_values, case_results, fill_garbage,
    gen_tensor, gen_values, launch_cached, pack, skip_reason,
)

SEED = 2468
P2P_WORLDS = [2, 3]
SHAPES = [(0,), (1,), (7,), (1023,), (3, 5, 7)]
BIG = [(100_003,), (1_000_003,)]
TIMEOUT = 300

pytestmark = pytest.mark.timeout(TIMEOUT + 60)
worlds = pytest.mark.parametrize("world", P2P_WORLDS, ids=lambda w: f"w{w}")


def crc(key):
    return zlib.crc32(key.encode())


def sid(shape):
    return "x".join(map(str, shape))


def ring_shapes(dtype):
    return SHAPES + (BIG if dtype == "float32" else [])


def _empty(dtype, shape, salt=0):
    import torch
    return fill_garbage(torch.empty(shape, dtype=getattr(torch, dtype)), salt)


def _ring(ctx, dtype, shape, mode):
    """Every rank sends to its right neighbour and receives from its left."""
    import torch.distributed as dist
    key = f"ring/{mode}/{dtype}/{sid(shape)}"
    ws, r = ctx.world_size, ctx.rank
    right, left = (r + 1) % ws, (r - 1) % ws
    out = gen_tensor(SEED, r, dtype, shape, "any", crc(key))
    inp = _empty(dtype, shape)
    if mode == "isend":
        works = [dist.isend(out, dst=right), dist.irecv(inp, src=left)]
        for w in works:
            w.wait()
    else:  # batch_isend_irecv
        ops = [dist.P2POp(dist.isend, out, right), dist.P2POp(dist.irecv, inp, left)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    return pack(inp)


def _star(ctx):
    """Blocking send/recv between rank 0 and each peer, both directions."""
    import torch.distributed as dist
    ws, r = ctx.world_size, ctx.rank
    got = {}
    for j in range(1, ws):
        key = f"star/to{j}"
        if r == 0:
            dist.send(gen_tensor(SEED, 0, "int64", (11 + j,), "any", crc(key)), dst=j)
        elif r == j:
            t = _empty("int64", (11 + j,))
            dist.recv(t, src=0)
            got[key] = pack(t)
    for j in range(1, ws):
        key = f"star/from{j}"
        if r == j:
            dist.send(gen_tensor(SEED, j, "float64", (5, j), "any", crc(key)), dst=0)
        elif r == 0:
            t = _empty("float64", (5, j))
            dist.recv(t, src=j)
            got[key] = pack(t)
    return got


TAGS = [(11, (5,)), (22, (9,)), (33, (0,)), (44, (2, 3))]


def _tags(ctx):
    """Rank 0 sends one message per tag to rank 1; rank 1 receives them in the
    reverse order, so only tag matching can pair them right. Then three
    messages under one tag arrive in the order they were sent."""
    import torch.distributed as dist
    r = ctx.rank
    got = {}
    if r == 0:
        works = [dist.isend(gen_tensor(SEED, 0, "float32", shape, "any", crc(f"tag{tag}")), dst=1, tag=tag)
                 for tag, shape in TAGS]
        works += [dist.isend(gen_tensor(SEED, 0, "int32", (4,), "any", crc(f"fifo{i}")), dst=1, tag=7)
                  for i in range(3)]
        for w in works:
            w.wait()
    elif r == 1:
        bufs = {tag: _empty("float32", shape, tag) for tag, shape in TAGS}
        works = [dist.irecv(bufs[tag], src=0, tag=tag) for tag, _ in reversed(TAGS)]
        fifo = [_empty("int32", (4,), i) for i in range(3)]
        works += [dist.irecv(t, src=0, tag=7) for t in fifo]
        for w in reversed(works):
            w.wait()
        got = {f"tag{tag}": pack(bufs[tag]) for tag, _ in TAGS}
        got.update({f"fifo{i}": pack(t) for i, t in enumerate(fifo)})
    return got


def _any_source(ctx):
    """Rank 0 receives world-1 messages with src=None; recv returns the sender."""
    import torch.distributed as dist
    ws, r = ctx.world_size, ctx.rank
    if r == 0:
        got = []
        for _ in range(ws - 1):
            t = _empty("int64", (6,))
            sender = dist.recv(t)
            got.append((sender, pack(t)))
        return got
    dist.send(gen_tensor(SEED, r, "int64", (6,), "any", crc("anysrc")), dst=0)
    return None


def _subgroup_p2p(ctx):
    """Send inside new_group([0, world-1]): dst/src are global ranks, or
    group_dst/group_src are group ranks."""
    import torch.distributed as dist
    ws, r = ctx.world_size, ctx.rank
    last = ws - 1
    g = dist.new_group([0, last])
    got = {}
    if r == 0:
        dist.send(gen_tensor(SEED, 0, "float32", (8,), "any", crc("sub/a")), dst=last, group=g)
        t = _empty("float32", (3,))
        dist.recv(t, group=g, group_src=1)
        got["sub/b"] = pack(t)
    elif r == last:
        t = _empty("float32", (8,))
        dist.recv(t, src=0, group=g)
        got["sub/a"] = pack(t)
        dist.send(gen_tensor(SEED, last, "float32", (3,), "any", crc("sub/b")), group=g, group_dst=0)
    return got


def _noncontig(ctx):
    """Send a transposed view into a transposed view: both ends either work
    or refuse at call time."""
    import datetime
    import torch.distributed as dist
    r, ws = ctx.rank, ctx.world_size
    if r not in (0, 1):
        return None
    base = gen_tensor(SEED, r, "float32", (4, 6), "any", crc("nc"))
    view = base.t()
    try:
        if r == 0:
            w = dist.isend(view, dst=1)
        else:
            w = dist.irecv(view, src=0)
        w.wait(timeout=datetime.timedelta(seconds=15))
    except Exception as exc:  # noqa: BLE001 - a clear refusal is allowed
        return {"raised": f"{type(exc).__name__}: {exc}"}
    del ws
    return {"value": pack(view)}


OVERLAP_N = 1_000_003


def _overlap(ctx):
    """send/recv in flight while collectives run on the same group."""
    import torch
    import torch.distributed as dist
    ws, r = ctx.world_size, ctx.rank
    out = gen_tensor(SEED, r, "float32", (OVERLAP_N,), "any", crc("overlap"))
    inp = _empty("float32", (OVERLAP_N,))
    works = [dist.isend(out, dst=(r + 1) % ws), dist.irecv(inp, src=(r - 1) % ws)]
    sums = []
    for i in range(3):
        t = torch.full((1000,), float(r + i))
        dist.all_reduce(t)
        sums.append(t[0].item())
    for w in works:
        w.wait()
    return {"recv": pack(inp), "sums": sums}


def _final_check(ctx):
    import torch
    import torch.distributed as dist
    t = torch.full((3,), float(ctx.rank + 1))
    dist.all_reduce(t)
    return t.tolist()


def p2p_sweep(ctx):
    out = {}
    for dtype in DTYPES:
        if skip_reason(ctx.backend, dtype=dtype):
            continue
        for shape in ring_shapes(dtype):
            out[f"ring/isend/{dtype}/{sid(shape)}"] = attempt(_ring, ctx, dtype, shape, "isend")
    for dtype in ("float32", "bool", "bfloat16"):
        for shape in SHAPES:
            out[f"ring/batch/{dtype}/{sid(shape)}"] = attempt(_ring, ctx, dtype, shape, "batch")
    out["star"] = attempt(_star, ctx)
    out["tags"] = attempt(_tags, ctx)
    out["any_source"] = attempt(_any_source, ctx)
    out["subgroup"] = attempt(_subgroup_p2p, ctx)
    out["noncontig"] = attempt(_noncontig, ctx)
    out["overlap"] = attempt(_overlap, ctx)
    out["final"] = attempt(_final_check, ctx)
    return out


def results(backend, world):
    return launch_cached("p2p", p2p_sweep, world, backend, timeout=TIMEOUT)


def want_bits(rank, dtype, shape, key):
    return bits_of_values(gen_values(SEED, rank, dtype, shape, "any", crc(key)), dtype)


@worlds
@pytest.mark.parametrize("dtype", DTYPES)
def test_ring_isend_irecv(backend, world, dtype):
    reason = skip_reason(backend, dtype=dtype)
    if reason:
        pytest.skip(reason)
    res = results(backend, world)
    for shape in ring_shapes(dtype):
        key = f"ring/isend/{dtype}/{sid(shape)}"
        for r, p in enumerate(case_results(res, key, key)):
            assert_equal_exact(p, want_bits((r - 1) % world, dtype, shape, key), f"{key} world {world} rank {r}")


@worlds
@pytest.mark.parametrize("dtype", ["float32", "bool", "bfloat16"])
def test_batch_isend_irecv(backend, world, dtype):
    res = results(backend, world)
    for shape in SHAPES:
        key = f"ring/batch/{dtype}/{sid(shape)}"
        for r, p in enumerate(case_results(res, key, key)):
            assert_equal_exact(p, want_bits((r - 1) % world, dtype, shape, key), f"{key} world {world} rank {r}")


@worlds
def test_blocking_send_recv(backend, world):
    res = results(backend, world)
    per_rank = case_results(res, "star", "send/recv")
    for j in range(1, world):
        key = f"star/to{j}"
        assert_equal_exact(per_rank[j][key], want_bits(0, "int64", (11 + j,), key), f"{key} world {world}")
        key = f"star/from{j}"
        assert_equal_exact(per_rank[0][key], want_bits(j, "float64", (5, j), key), f"{key} world {world}")


@worlds
def test_tags_match_out_of_order(backend, world):
    got = case_results(results(backend, world), "tags", "tags")[1]
    for tag, shape in TAGS:
        assert_equal_exact(got[f"tag{tag}"], want_bits(0, "float32", shape, f"tag{tag}"),
                           f"message with tag {tag} received out of order")
    for i in range(3):
        assert_equal_exact(got[f"fifo{i}"], want_bits(0, "int32", (4,), f"fifo{i}"),
                           f"message {i} of three under one tag (FIFO order)")


@worlds
def test_recv_any_source(backend, world):
    got = case_results(results(backend, world), "any_source", "recv any source")[0]
    senders = [s for s, _ in got]
    assert sorted(senders) == list(range(1, world)), f"recv(src=None) returned senders {senders}"
    for sender, p in got:
        assert_equal_exact(p, want_bits(sender, "int64", (6,), "anysrc"),
                           f"recv(src=None) returned {sender}, but the data is not that rank's")


@worlds
def test_p2p_in_subgroup(backend, world):
    per_rank = case_results(results(backend, world), "subgroup", "subgroup p2p")
    last = world - 1
    assert_equal_exact(per_rank[last]["sub/a"], want_bits(0, "float32", (8,), "sub/a"),
                       "send(dst=global rank, group=g)")
    assert_equal_exact(per_rank[0]["sub/b"], want_bits(last, "float32", (3,), "sub/b"),
                       "send(group_dst=0) / recv(group_src=1)")


@worlds
def test_noncontiguous_send_recv(backend, world):
    res = results(backend, world)
    outcome = case_results(res, "noncontig", "noncontiguous send/recv")[:2]
    raised = [o.get("raised") for o in outcome]
    if any(raised):
        assert all(raised), f"only one end refused a transposed view: {raised}"
        for msg in raised:
            assert any(w in msg.lower() for w in ("contiguous", "stride", "dense")), (
                f"refusal does not say why: {msg}")
    else:
        sent = gen_values(SEED, 0, "float32", (4, 6), "any", crc("nc")).T
        assert_equal_exact(outcome[1]["value"], sent, "transposed view received")
    want = float(sum(range(1, world + 1)))
    for r, v in enumerate(case_results(res, "final", "all_reduce after p2p")):
        assert v == [want] * 3, f"all_reduce after the p2p cases on rank {r}: {v}"


@worlds
def test_p2p_overlaps_collectives(backend, world):
    for r, o in enumerate(case_results(results(backend, world), "overlap", "overlap")):
        assert o["sums"] == [float(sum(q + i for q in range(world))) for i in range(3)], (
            f"rank {r}: all_reduce while p2p in flight: {o['sums']}")
        assert_equal_exact(o["recv"], want_bits((r - 1) % world, "float32", (OVERLAP_N,), "overlap"),
                           f"rank {r}: 4 MB message received while collectives ran")
