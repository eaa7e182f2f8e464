"""Errors: bad input refused at call time with a clear message (and the group
still works afterwards), a peer that never joins (timeouts name the op and
come back in bounded time), and destroy_process_group + init again."""

import os
import re
import time

import pytest

from harness import attempt, case_results, launch_cached, skip_reason

BAD_INPUT_WORLDS = [2]
TIMEOUT = 240
SHORT_TIMEOUT_S = 3.0
pytestmark = pytest.mark.timeout(TIMEOUT + 60)

SIZE_WORDS = ("size", "numel", "shape", "length", "element", "count", "match")
DTYPE_WORDS = ("dtype", "type")
RANK_WORDS = ("rank", "root", "src", "dst", "peer")
DEVICE_WORDS = ("device", "meta", "cpu", "cuda")
LIST_WORDS = SIZE_WORDS + ("list", "tensors")


def bad_calls(ws):
    """name -> (function(torch, dist, rank) issuing the bad call with
    async_op=True where the API has it, words one of which the message must
    contain). Every rank makes the same call, so no rank is left waiting."""
    def agit_wrong_size(torch, dist, r):
        return dist.all_gather_into_tensor(torch.zeros(3 * ws + 1), torch.ones(3), async_op=True)

    def agit_wrong_dtype(torch, dist, r):
        return dist.all_gather_into_tensor(torch.zeros(3 * ws, dtype=torch.float64), torch.ones(3),
                                           async_op=True)

    def all_gather_wrong_list_length(torch, dist, r):
        return dist.all_gather([torch.zeros(3) for _ in range(ws + 1)], torch.ones(3), async_op=True)

    def all_gather_wrong_shape(torch, dist, r):
        return dist.all_gather([torch.zeros(4) for _ in range(ws)], torch.ones(3), async_op=True)

    def all_gather_mixed_dtypes(torch, dist, r):
        outs = [torch.zeros(3) for _ in range(ws - 1)] + [torch.zeros(3, dtype=torch.float64)]
        return dist.all_gather(outs, torch.ones(3), async_op=True)

    def coalesced_mixed_dtypes(torch, dist, r):
        return dist.all_reduce_coalesced([torch.ones(3), torch.ones(2, dtype=torch.int64)], async_op=True)

    def reduce_scatter_tensor_wrong_size(torch, dist, r):
        return dist.reduce_scatter_tensor(torch.zeros(2), torch.ones(2 * ws + 3), async_op=True)

    def reduce_scatter_list_length(torch, dist, r):
        return dist.reduce_scatter(torch.zeros(2), [torch.ones(2) for _ in range(ws + 1)], async_op=True)

    def all_to_all_single_bad_splits(torch, dist, r):
        return dist.all_to_all_single(torch.zeros(ws), torch.ones(ws), output_split_sizes=[1] * ws,
                                      input_split_sizes=[2] * ws, async_op=True)

    def broadcast_root_out_of_range(torch, dist, r):
        return dist.broadcast(torch.ones(3), src=ws, async_op=True)

    def reduce_root_out_of_range(torch, dist, r):
        return dist.reduce(torch.ones(3), dst=ws + 2, async_op=True)

    def gather_root_out_of_range(torch, dist, r):
        return dist.gather(torch.ones(3), gather_list=None, dst=ws, async_op=True)

    def scatter_root_out_of_range(torch, dist, r):
        return dist.scatter(torch.ones(3), scatter_list=None, src=ws, async_op=True)

    def send_to_missing_rank(torch, dist, r):
        return dist.isend(torch.ones(3), dst=ws + 1)

    def recv_from_missing_rank(torch, dist, r):
        return dist.irecv(torch.ones(3), src=ws + 1)

    return {
        "all_gather_into_tensor-output_numel": (agit_wrong_size, SIZE_WORDS),
        "all_gather_into_tensor-output_dtype": (agit_wrong_dtype, DTYPE_WORDS),
        "all_gather-list_length": (all_gather_wrong_list_length, LIST_WORDS),
        "all_gather-output_shape": (all_gather_wrong_shape, SIZE_WORDS),
        "all_gather-mixed_dtypes": (all_gather_mixed_dtypes, DTYPE_WORDS),
        "all_reduce_coalesced-mixed_dtypes": (coalesced_mixed_dtypes, DTYPE_WORDS),
        "reduce_scatter_tensor-input_numel": (
            reduce_scatter_tensor_wrong_size, SIZE_WORDS),
        "reduce_scatter-list_length": (reduce_scatter_list_length, LIST_WORDS),
        "all_to_all_single-bad_splits": (all_to_all_single_bad_splits, SIZE_WORDS + ("split",)),
        "broadcast-root_out_of_range": (broadcast_root_out_of_range, RANK_WORDS),
        "reduce-root_out_of_range": (reduce_root_out_of_range, RANK_WORDS),
        "gather-root_out_of_range": (gather_root_out_of_range, RANK_WORDS),
        "scatter-root_out_of_range": (scatter_root_out_of_range, RANK_WORDS),
        "isend-peer_out_of_range": (send_to_missing_rank, RANK_WORDS),
        "irecv-peer_out_of_range": (recv_from_missing_rank, RANK_WORDS),
    }


# Bad calls that a backend may be unable to survive (see harness.skip_reason).
BAD_CALL_FEATURE = {"isend-peer_out_of_range": "p2p_peer_out_of_range",
                    "irecv-peer_out_of_range": "p2p_peer_out_of_range"}


def _issue(fn):
    """Run a bad call; say at which stage it failed: call, wait, or never."""
    import torch
    import torch.distributed as dist
    try:
        work = fn(torch, dist, dist.get_rank())
    except Exception as exc:  # noqa: BLE001
        return {"stage": "call", "message": f"{type(exc).__name__}: {exc}"}
    if work is None:
        return {"stage": "none", "message": "returned None"}
    try:
        work.wait()
    except Exception as exc:  # noqa: BLE001
        return {"stage": "wait", "message": f"{type(exc).__name__}: {exc}"}
    return {"stage": "none", "message": None}


def _group_works(ctx, tag):
    import torch
    import torch.distributed as dist
    t = torch.full((4,), float(10 * tag + ctx.rank + 1))
    dist.all_reduce(t)
    return t.tolist()


def _meta(ctx):
    """A meta tensor: torch routes c10d ops on meta tensors to a no-op fake
    kernel before any backend sees them; either that, or a clear refusal."""
    import torch
    import torch.distributed as dist
    t = torch.empty(4, device="meta")
    try:
        dist.all_reduce(t)
    except Exception as exc:  # noqa: BLE001
        return {"raised": f"{type(exc).__name__}: {exc}"}
    return {"raised": None}


def _cuda(ctx):
    import torch
    import torch.distributed as dist
    if not torch.cuda.is_available():
        return {"unavailable": True}
    try:
        dist.all_reduce(torch.ones(4, device="cuda"))
    except Exception as exc:  # noqa: BLE001
        return {"raised": f"{type(exc).__name__}: {exc}"}
    return {"raised": None}


def _reinit(ctx):
    """destroy_process_group, then init again (FileStore, then TCP), twice."""
    import torch
    import torch.distributed as dist
    cycles = []
    dist.destroy_process_group()
    for cycle, kind in ((1, "file"), (2, "tcp")):
        ctx.init(name=str(cycle), kind=kind)
        t = torch.full((3,), float(ctx.rank + cycle))
        dist.all_reduce(t)
        g = dist.new_group(list(range(ctx.world_size)))
        u = torch.full((2,), float(ctx.rank))
        dist.broadcast(u, src=ctx.world_size - 1, group=g)
        cycles.append({"backend": dist.get_backend(), "sum": t.tolist(), "bcast": u.tolist(),
                       "world": dist.get_world_size()})
        if cycle == 1:
            dist.destroy_process_group()
    return cycles  # the harness destroys the last one


def bad_input_sweep(ctx):
    out = {}
    for i, (name, (fn, _words)) in enumerate(bad_calls(ctx.world_size).items()):
        if skip_reason(ctx.backend, feature=BAD_CALL_FEATURE.get(name)):
            continue
        out[name] = _issue(fn)
        out[f"after:{name}"] = attempt(_group_works, ctx, i)
    out["meta"] = attempt(_meta, ctx)
    out["after:meta"] = attempt(_group_works, ctx, 50)
    out["cuda"] = attempt(_cuda, ctx)
    out["after:cuda"] = attempt(_group_works, ctx, 51)
    out["reinit"] = attempt(_reinit, ctx)
    return out


def bad_input_results(backend, world):
    return launch_cached("bad_input", bad_input_sweep, world, backend, timeout=TIMEOUT)


@pytest.mark.parametrize("world", BAD_INPUT_WORLDS, ids=lambda w: f"w{w}")
@pytest.mark.parametrize("case", list(bad_calls(2)))
def test_bad_input_refused(backend, world, case):
    reason = skip_reason(backend, feature=BAD_CALL_FEATURE.get(case))
    if reason:
        pytest.skip(reason)
    res = bad_input_results(backend, world)
    words = bad_calls(world)[case][1]
    i = list(bad_calls(world)).index(case)
    for r, o in enumerate(case_results(res, case, case)):
        assert o["stage"] != "none", f"{case}: rank {r} accepted the call ({o['message']})"
        if backend != "gloo":
            # gohccl validates before it queues anything: the call itself raises.
            assert o["stage"] == "call", (
                f"{case}: rank {r} raised only at wait(), not at call time: {o['message']}")
        low = o["message"].lower()
        assert any(w in low for w in words), f"{case}: rank {r}: message is not clear: {o['message']}"
    want = float(sum(10 * i + r + 1 for r in range(world)))
    for r, v in enumerate(case_results(res, f"after:{case}", f"all_reduce after {case}")):
        assert v == [want] * 4, f"all_reduce after {case} on rank {r}: {v}"


@pytest.mark.parametrize("world", BAD_INPUT_WORLDS, ids=lambda w: f"w{w}")
def test_meta_tensor(backend, world):
    res = bad_input_results(backend, world)
    outcome = case_results(res, "meta", "meta")
    raised = [o["raised"] for o in outcome]
    if any(raised):
        assert all(raised), f"meta tensor refused on some ranks only: {raised}"
        for msg in raised:
            assert any(w in msg.lower() for w in DEVICE_WORDS), f"meta refusal is not clear: {msg}"
    # Either way nothing was sent: the next collective lines up on every rank.
    want = float(sum(500 + r + 1 for r in range(world)))
    for r, v in enumerate(case_results(res, "after:meta", "all_reduce after meta")):
        assert v == [want] * 4, f"all_reduce after the meta tensor on rank {r}: {v}"


@pytest.mark.parametrize("world", BAD_INPUT_WORLDS, ids=lambda w: f"w{w}")
def test_cuda_tensor(backend, world):
    res = bad_input_results(backend, world)
    outcome = case_results(res, "cuda", "cuda")
    if outcome[0].get("unavailable"):
        pytest.skip("no CUDA device on this machine")
    raised = [o["raised"] for o in outcome]
    if any(raised):
        assert all(raised), f"CUDA tensor refused on some ranks only: {raised}"
        for msg in raised:
            assert any(w in msg.lower() for w in DEVICE_WORDS + ("backend",)), f"unclear: {msg}"
    want = float(sum(510 + r + 1 for r in range(world)))
    for r, v in enumerate(case_results(res, "after:cuda", "all_reduce after cuda")):
        assert v == [want] * 4, f"all_reduce after the CUDA tensor on rank {r}: {v}"


@pytest.mark.parametrize("world", BAD_INPUT_WORLDS, ids=lambda w: f"w{w}")
def test_destroy_and_init_again(backend, world):
    for r, cycles in enumerate(case_results(bad_input_results(backend, world), "reinit", "reinit")):
        assert len(cycles) == 2
        for c, o in enumerate(cycles, start=1):
            assert o["backend"] == backend, f"rank {r} cycle {c}: backend {o['backend']}"
            assert o["world"] == world
            assert o["sum"] == [float(sum(q + c for q in range(world)))] * 3, f"rank {r} cycle {c}: {o}"
            assert o["bcast"] == [float(world - 1)] * 2, f"rank {r} cycle {c}: {o}"


# ------------------------------------------------------------------ timeouts

TIMED_OPS = ["allreduce", "broadcast", "allgather", "barrier", "recv"]
OP_NAMES = {
    "allreduce": ("allreduce", "all_reduce"),
    "broadcast": ("broadcast", "bcast"),
    "allgather": ("allgather", "all_gather"),
    "barrier": ("barrier",),
    "recv": ("recv",),
}


def _timeouts(ctx):
    """init_process_group(timeout=3 s). Rank 1 takes part in creating every
    group, then never joins an op; rank 0 runs each op on its own group (a
    timed-out communicator refuses everything after its first error)."""
    import datetime
    import torch
    import torch.distributed as dist
    r = ctx.rank
    groups = {"allreduce": None}
    for op in TIMED_OPS[1:]:
        groups[op] = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=SHORT_TIMEOUT_S))
    done = os.path.join(ctx.workdir, "timeouts-done")
    if r != 0:
        deadline = time.time() + 120
        while not os.path.exists(done) and time.time() < deadline:
            time.sleep(0.05)
        return None
    # The default group's all_reduce blocks; the other four are issued
    # async_op=True on their own groups, all in flight together, then waited.
    out = {}
    start = time.time()
    try:
        dist.all_reduce(torch.ones(4))
        out["allreduce"] = {"message": None, "elapsed": time.time() - start}
    except Exception as exc:  # noqa: BLE001
        out["allreduce"] = {"message": f"{type(exc).__name__}: {exc}", "elapsed": time.time() - start}
    issue = {
        # Rank 0 must be a receiver: a root may finish once its data is on
        # the wire, without its peers.
        "broadcast": lambda g: dist.broadcast(torch.ones(4), src=1, group=g, async_op=True),
        "allgather": lambda g: dist.all_gather_into_tensor(torch.zeros(8), torch.ones(4), group=g,
                                                           async_op=True),
        "barrier": lambda g: dist.barrier(group=g, async_op=True),
        "recv": lambda g: dist.irecv(torch.ones(4), src=1, group=g),
    }
    start = time.time()
    works = {}
    for op in TIMED_OPS[1:]:
        try:
            works[op] = issue[op](groups[op])
        except Exception as exc:  # noqa: BLE001
            out[op] = {"message": f"issue: {type(exc).__name__}: {exc}", "elapsed": time.time() - start}
    for op, work in works.items():
        try:
            work.wait()
            out[op] = {"message": None, "elapsed": time.time() - start}
        except Exception as exc:  # noqa: BLE001
            out[op] = {"message": f"{type(exc).__name__}: {exc}", "elapsed": time.time() - start}
    # The next op on the default group, whose all_reduce timed out.
    start = time.time()
    try:
        dist.all_reduce(torch.ones(4))
        out["after"] = {"message": None, "elapsed": time.time() - start}
    except Exception as exc:  # noqa: BLE001
        out["after"] = {"message": f"{type(exc).__name__}: {exc}", "elapsed": time.time() - start}
    with open(done, "w"):
        pass
    return out


def timeout_results(backend):
    return launch_cached("timeouts", _timeouts, 2, backend, timeout=TIMEOUT,
                         pg_timeout=SHORT_TIMEOUT_S, destroy=False)


@pytest.mark.parametrize("op", TIMED_OPS)
def test_missing_peer_times_out(backend, op):
    o = timeout_results(backend)[0][op]
    assert o["message"], f"{op} with a peer that never joins returned after {o['elapsed']:.1f}s"
    assert o["elapsed"] < 15, f"{op} took {o['elapsed']:.1f}s to time out with a {SHORT_TIMEOUT_S}s timeout"
    assert o["elapsed"] > SHORT_TIMEOUT_S * 0.5, f"{op} failed before its timeout: {o['message']}"
    low = o["message"].lower()
    assert any(w in low for w in ("timeout", "timed out", "deadline")), f"{op}: not a timeout: {o['message']}"


@pytest.mark.parametrize("op", TIMED_OPS)
def test_timeout_message_names_op(backend, op):
    reason = skip_reason(backend, feature="timeout_names_op")
    if reason:
        pytest.skip(reason)
    msg = timeout_results(backend)[0][op]["message"]
    assert msg and any(n in msg.lower() for n in OP_NAMES[op]), f"{op}: message does not name the op: {msg}"


def test_op_after_timeout_fails_fast(backend):
    """A timed-out communicator is broken: the next op fails at once."""
    o = timeout_results(backend)[0]["after"]
    assert o["message"], "an all_reduce on a timed-out communicator succeeded"
    assert o["elapsed"] < 1.5, f"the op after a timeout took {o['elapsed']:.1f}s instead of failing at once"


# ------------------------------------------------ ranks issuing different ops

MISMATCHES = ["count", "dtype", "kind"]


def _mismatch(ctx):
    """Each case on its own [0, 1] group: rank 0 and rank 1 issue different
    collectives. Both need the other's data, so neither can finish alone;
    each must fail in bounded time instead of mixing the two ops."""
    import datetime
    import torch
    import torch.distributed as dist
    r = ctx.rank
    groups = {m: dist.new_group([0, 1], timeout=datetime.timedelta(seconds=SHORT_TIMEOUT_S))
              for m in MISMATCHES}
    calls = {
        "count": lambda g: dist.all_reduce(torch.ones(4 if r == 0 else 8), group=g),
        "dtype": lambda g: dist.all_reduce(torch.ones(4, dtype=torch.float32 if r == 0 else torch.int32), group=g),
        "kind": (lambda g: dist.all_reduce(torch.ones(4), group=g)) if r == 0 else
                (lambda g: dist.all_gather_into_tensor(torch.zeros(4), torch.ones(2), group=g)),
    }
    out = {}
    for m in MISMATCHES:
        start = time.time()
        try:
            calls[m](groups[m])
            out[m] = {"message": None, "elapsed": time.time() - start}
        except Exception as exc:  # noqa: BLE001
            out[m] = {"message": f"{type(exc).__name__}: {exc}", "elapsed": time.time() - start}
    return out


@pytest.mark.parametrize("mismatch", MISMATCHES)
def test_mismatched_collectives_reported(backend, mismatch):
    reason = skip_reason(backend, feature="mismatch_detection")
    if reason:
        pytest.skip(reason)
    per_rank = launch_cached("mismatch", _mismatch, 2, backend, timeout=TIMEOUT,
                             pg_timeout=SHORT_TIMEOUT_S, destroy=False)
    for r, out in enumerate(per_rank):
        o = out[mismatch]
        assert o["message"], f"rank {r}: a {mismatch} mismatch between ranks went unnoticed"
        assert o["elapsed"] < 15, f"rank {r}: the {mismatch} mismatch took {o['elapsed']:.1f}s to fail"
    messages = [out[mismatch]["message"].lower() for out in per_rank]
    # DESIGN: every frame carries the op's stamp, so a different collective is
    # detected and named, not waited out.
    assert any(w in m for m in messages for w in ("mismatch", "differ")), (
        f"{mismatch} mismatch: the messages do not say what went wrong: {messages}")


# ------------------------- mismatches at world 3 and 4, and what follows them

# Each case on its own group of every rank: rank 1 issues something else than
# the others. The rank that receives a frame of the other op names both
# fingerprints; it tells every peer in an abort frame, so every rank fails
# within a fraction of the group's timeout (MISMATCH_PG_TIMEOUT_S), and the
# next op on the group fails at once with the first error.
WORLD_MISMATCHES = ["kind", "dtype", "count", "root", "op", "order", "skipped"]
MISMATCH_WORLDS = [3, 4]
MISMATCH_PG_TIMEOUT_S = 30.0
FAST_S = 5.0  # "within a fraction of the timeout", with room for a loaded machine
N = 8


def _world_mismatch_calls(torch, dist, r):
    """case -> (what the other ranks issue, what rank 1 issues, fingerprints
    both must appear in every rank's message). Each side is a list of ops."""
    ar = lambda g, dtype=torch.float32, op=dist.ReduceOp.SUM, n=N: dist.all_reduce(  # noqa: E731
        torch.ones(n, dtype=dtype), op=op, group=g)
    bc = lambda g, src=0: dist.broadcast(torch.ones(N), src=src, group=g)  # noqa: E731
    return {
        "kind": ([ar], [lambda g: bc(g)],
                 [f"allreduce float32 count {N} op sum", f"broadcast float32 count {N} root 0"]),
        "dtype": ([ar], [lambda g: ar(g, dtype=torch.int32)],
                  [f"allreduce float32 count {N}", f"allreduce int32 count {N}"]),
        "count": ([ar], [lambda g: ar(g, n=N + 3)],
                  [f"allreduce float32 count {N} op sum", f"allreduce float32 count {N + 3} op sum"]),
        # Each root only sends, so both may finish the broadcast; the frame
        # of the other tree is found by the next op, whose message names it
        # (root 0's or root 1's, by which rank found it) and that op.
        "root": ([bc], [lambda g: bc(g, src=1)], [f"broadcast float32 count {N} root "]),
        "op": ([ar], [lambda g: ar(g, op=dist.ReduceOp.MAX)], ["op sum", "op max"]),
        # The same two ops in the other order.
        "order": ([ar, bc], [bc, ar],
                  [f"allreduce float32 count {N} op sum", f"broadcast float32 count {N} root 0"]),
        # Rank 1 leaves out the first of the two.
        "skipped": ([ar, bc], [bc],
                    [f"allreduce float32 count {N} op sum", f"broadcast float32 count {N} root 0"]),
    }


def _outcome(fn):
    start = time.time()
    try:
        fn()
    except Exception as exc:  # noqa: BLE001
        return {"message": f"{type(exc).__name__}: {exc}", "elapsed": time.time() - start}
    return {"message": None, "elapsed": time.time() - start}


def _world_mismatch(ctx):
    import datetime
    import torch
    import torch.distributed as dist
    r, ws = ctx.rank, ctx.world_size
    timeout = datetime.timedelta(seconds=MISMATCH_PG_TIMEOUT_S)
    calls = _world_mismatch_calls(torch, dist, r)
    groups = {m: dist.new_group(list(range(ws)), timeout=timeout) for m in WORLD_MISMATCHES}
    groups["missing"] = dist.new_group(list(range(ws)), timeout=datetime.timedelta(seconds=SHORT_TIMEOUT_S))
    out = {}
    for m in WORLD_MISMATCHES:
        g = groups[m]
        ops = calls[m][1] if r == 1 else calls[m][0]
        start = time.time()
        first = None
        # A rank whose part needed nothing from rank 1 (a broadcast root)
        # may finish an op; it must learn at its next one.
        for op in ops + [lambda g: dist.all_reduce(torch.ones(2), group=g)]:
            o = _outcome(lambda: op(g))
            if o["message"]:
                first = {"message": o["message"], "elapsed": time.time() - start}
                break
        after = _outcome(lambda: dist.barrier(group=g)) if first else None
        out[m] = {"first": first, "after": after}
    # Rank 1 never issues the op, but stays (an exit would be a lost peer):
    # the others time out naming it.
    marks = [os.path.join(ctx.workdir, f"missing-done-{q}") for q in range(ws) if q != 1]
    if r != 1:
        out["missing"] = _outcome(lambda: dist.all_reduce(torch.ones(N), group=groups["missing"]))
        open(os.path.join(ctx.workdir, f"missing-done-{r}"), "w").close()
    else:
        deadline = time.time() + 60
        while not all(os.path.exists(p) for p in marks) and time.time() < deadline:
            time.sleep(0.05)
    return out


def world_mismatch_results(backend, world):
    return launch_cached("world_mismatch", _world_mismatch, world, backend, timeout=TIMEOUT,
                         pg_timeout=MISMATCH_PG_TIMEOUT_S, destroy=False)


@pytest.mark.parametrize("world", MISMATCH_WORLDS, ids=lambda w: f"w{w}")
@pytest.mark.parametrize("mismatch", WORLD_MISMATCHES)
def test_mismatch_reaches_every_rank(backend, world, mismatch):
    reason = skip_reason(backend, feature="mismatch_detection")
    if reason:
        pytest.skip(reason)
    import torch
    import torch.distributed as dist
    wants = _world_mismatch_calls(torch, dist, 0)[mismatch][2]
    for r, out in enumerate(world_mismatch_results(backend, world)):
        o = out[mismatch]
        assert o["first"], f"rank {r}: a {mismatch} mismatch went unnoticed (no op failed)"
        msg, elapsed = o["first"]["message"], o["first"]["elapsed"]
        assert elapsed < FAST_S, (
            f"rank {r}: the {mismatch} mismatch took {elapsed:.1f}s to fail "
            f"(timeout {MISMATCH_PG_TIMEOUT_S:.0f}s): {msg}")
        assert "collective mismatch" in msg, f"rank {r}: {msg}"
        for w in wants:
            assert w in msg, f"rank {r}: message does not name {w!r}: {msg}"
        assert re.search(r"rank \d \(this process\) expected .* but rank \d sent", msg), \
            f"rank {r}: message does not name both ranks: {msg}"
        # Broken: the next op fails at once, with the first error.
        a = o["after"]
        assert a["message"], f"rank {r}: a barrier after the mismatch succeeded"
        assert a["elapsed"] < 1.5, f"rank {r}: the op after the mismatch took {a['elapsed']:.1f}s"
        assert "collective mismatch" in a["message"], f"rank {r}: not the first error: {a['message']}"


# How a timeout names the peers it waited for: over links ("not heard from
# in #1: rank 1 (...)", or a peer that is itself stalled), on the
# shared-memory engine ("no inputs from rank 1" / "ranks 1, 3").
SILENT_PEER = (r"not heard from in #1: rank \d|rank \d sent frames of #1 but not the awaited one|"
               r"no \w+ from (local )?ranks? \d")
RANK1_SILENT = (r"not heard from in #1: (rank \d \([^)]*\), )*rank 1 \(|"
                r"no \w+ from (local )?ranks? ([\d]+, )*1\b")


@pytest.mark.parametrize("world", MISMATCH_WORLDS, ids=lambda w: f"w{w}")
def test_missing_rank_times_out_naming_it(backend, world):
    """Rank 1 never issues the op: every other rank fails at about the
    timeout, naming the op, its sequence number, and between them rank 1 as
    the peer not heard from."""
    reason = skip_reason(backend, feature="timeout_names_op")
    if reason:
        pytest.skip(reason)
    per_rank = world_mismatch_results(backend, world)
    named = []
    for r, out in enumerate(per_rank):
        if r == 1:
            continue
        o = out["missing"]
        assert o["message"], f"rank {r}: the op without rank 1 succeeded"
        msg = o["message"]
        assert SHORT_TIMEOUT_S * 0.5 < o["elapsed"] < SHORT_TIMEOUT_S + FAST_S, f"rank {r}: {o['elapsed']:.1f}s: {msg}"
        assert "timed out" in msg and "allreduce #1" in msg, f"rank {r}: {msg}"
        # Over links: "not heard from in #1: rank 1 (...)"; on the
        # shared-memory engine: "no inputs from rank 1".
        assert re.search(SILENT_PEER, msg), f"rank {r}: no silent peer named: {msg}"
        named.append(bool(re.search(RANK1_SILENT, msg)))
    assert any(named), f"no rank named rank 1 as the silent peer: {[o.get('missing') for o in per_rank]}"


# --------------------------------------------------------------- dead peers

# Rank 2 of a world of 3 is a process of its own (a "victim" that the harness
# worker of rank 2 starts, so that its death is not a harness failure). Ranks
# 0 and 1 wait in an all_reduce that needs it; the worker then ends the victim
# in one of three ways. The survivors must raise within DEAD_FAST_S of its
# end, naming rank 2, far within their timeout (DEAD_PG_TIMEOUT_S): the loss
# is detected, not timed out.
DEATHS = ["sigkill", "exit", "destroy"]
DEAD_PG_TIMEOUT_S = 60.0
DEAD_FAST_S = 5.0


def _victim_main(init_method, world, mode, workdir):
    """The victim rank 2: join, take part in one all_reduce, then idle until
    killed (sigkill), or on a signal file exit without cleanup (exit) or
    destroy its process group while the others wait (destroy)."""
    import datetime
    import torch
    import torch.distributed as dist
    import gohccl  # noqa: F401
    dist.init_process_group("gohccl", init_method=init_method, rank=2, world_size=world,
                            timeout=datetime.timedelta(seconds=DEAD_PG_TIMEOUT_S))
    dist.all_reduce(torch.ones(4))
    go = os.path.join(workdir, f"victim-go-{mode}")
    deadline = time.time() + 120
    while not os.path.exists(go) and time.time() < deadline:
        time.sleep(0.01)
    if mode == "destroy":
        dist.destroy_process_group()
        time.sleep(2)  # alive, with its connections closed
    os._exit(3)


def _dead_peer(ctx):
    if ctx.rank == 2:
        return _end_victims(ctx)
    import torch
    import torch.distributed as dist
    out = {}
    for i, mode in enumerate(DEATHS):
        ctx.init(name=f"dead-{i}", timeout_s=DEAD_PG_TIMEOUT_S)
        dist.all_reduce(torch.ones(4))  # every rank is connected
        open(os.path.join(ctx.workdir, f"waiting-{mode}-{ctx.rank}"), "w").close()
        o = _outcome(lambda: dist.all_reduce(torch.ones(1000)))
        failed_at = time.time()
        with open(os.path.join(ctx.workdir, f"ended-{mode}")) as f:
            ended = float(f.read())
        o["after_end"] = failed_at - ended
        o["after_broken"] = _outcome(lambda: dist.barrier())
        out[mode] = o
        dist.destroy_process_group()
    return out


def _end_victims(ctx):
    """Rank 2's worker: start one victim per round (together, so that their
    start-up overlaps the earlier rounds; each waits in its own rendezvous),
    and end each once both survivors wait for it."""
    import signal
    import subprocess
    import sys
    victims = {}
    out = {}
    try:
        for i, mode in enumerate(DEATHS):
            code = (f"import test_errors; test_errors._victim_main({ctx.init_method(f'dead-{i}')!r}, "
                    f"{ctx.world_size}, {mode!r}, {ctx.workdir!r})")
            victims[mode] = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL)
        for mode in DEATHS:
            marks = [os.path.join(ctx.workdir, f"waiting-{mode}-{r}") for r in (0, 1)]
            deadline = time.time() + 90
            while not all(os.path.exists(p) for p in marks) and time.time() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)  # let both survivors block in their all_reduce
            with open(os.path.join(ctx.workdir, f"ended-{mode}"), "w") as f:
                f.write(repr(time.time()))
            if mode == "sigkill":
                victims[mode].send_signal(signal.SIGKILL)
            else:
                open(os.path.join(ctx.workdir, f"victim-go-{mode}"), "w").close()
            out[mode] = {"victim_rc": victims[mode].wait(timeout=60)}
    finally:
        for v in victims.values():
            if v.poll() is None:
                v.kill()
                v.wait()
    return out


@pytest.mark.parametrize("death", DEATHS)
def test_dead_peer_detected(backend, death):
    if backend == "gloo":
        pytest.skip("gloo's message for a lost peer names the socket, not the rank")
    per_rank = launch_cached("dead_peer", _dead_peer, 3, backend, timeout=TIMEOUT, init=False,
                             pg_timeout=DEAD_PG_TIMEOUT_S)
    assert per_rank[2][death]["victim_rc"] in (3, -9), per_rank[2][death]
    for r in (0, 1):
        o = per_rank[r][death]
        assert o["message"], f"rank {r}: the all_reduce succeeded without rank 2"
        assert o["after_end"] < DEAD_FAST_S, (
            f"rank {r}: raised {o['after_end']:.1f}s after rank 2 ended ({death}); "
            f"timeout {DEAD_PG_TIMEOUT_S:.0f}s: {o['message']}")
        msg = o["message"]
        assert "rank 2" in msg, f"rank {r}: the message does not name rank 2: {msg}"
        assert "timed out" not in msg, f"rank {r}: timed out instead of detecting the loss: {msg}"
        a = o["after_broken"]
        assert a["message"] and a["elapsed"] < 1.5, f"rank {r}: op after the loss: {a}"


# ------------------------------------------------------- abort and shutdown

def _abort_and_shutdown(ctx):
    """Rank 0 waits on ops rank 1 never joins (an all_reduce and an irecv),
    then aborts their group from another thread; then on a second group with
    a short timeout, destroys it with an op in progress and one queued.
    The default group must work afterwards."""
    import datetime
    import threading
    import torch
    import torch.distributed as dist
    r = ctx.rank
    ga = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=60))
    gs = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=SHORT_TIMEOUT_S))
    done = os.path.join(ctx.workdir, "abort-done")
    out = {}
    if r == 0:
        works = {"all_reduce": dist.all_reduce(torch.ones(4), group=ga, async_op=True),
                 "irecv": dist.irecv(torch.ones(4), src=1, group=ga)}
        time.sleep(0.5)
        aborted_at = []
        t = threading.Thread(target=lambda: (aborted_at.append(time.time()),
                                             dist.distributed_c10d._abort_process_group(ga)))
        t.start()
        for name, w in works.items():
            o = _outcome(w.wait)
            o["after_abort"] = time.time() - aborted_at[0]
            out[name] = o
        t.join(30)
        out["abort_returned"] = not t.is_alive()

        running = dist.all_reduce(torch.ones(4), group=gs, async_op=True)
        queued = dist.all_reduce(torch.ones(4), group=gs, async_op=True)
        time.sleep(0.2)
        start = time.time()
        dist.destroy_process_group(gs)
        out["destroy_s"] = time.time() - start
        out["running"] = _outcome(running.wait)
        out["queued"] = _outcome(queued.wait)
        open(done, "w").close()
    else:
        deadline = time.time() + 120
        while not os.path.exists(done) and time.time() < deadline:
            time.sleep(0.05)
    t = torch.full((3,), float(r + 1))
    dist.all_reduce(t)
    out["default_after"] = t.tolist()
    return out


def abort_results(backend):
    return launch_cached("abort", _abort_and_shutdown, 2, backend, timeout=TIMEOUT)


def test_abort_unblocks_waiting_ops(backend):
    if backend == "gloo":
        pytest.skip("gloo's abort is not exercised here")
    o = abort_results(backend)[0]
    assert o["abort_returned"], "abort() did not return"
    for name in ("all_reduce", "irecv"):
        w = o[name]
        assert w["message"], f"{name} waiting on an absent peer succeeded after abort"
        assert w["after_abort"] < 2.0, f"{name} ended {w['after_abort']:.1f}s after abort: {w['message']}"
        assert "abort" in w["message"].lower(), f"{name}: {w['message']}"


def test_shutdown_ends_every_op(backend):
    """destroy_process_group lets the op in progress end (here at its
    timeout: its peer never joins) and fails the queued one; nothing hangs,
    and the default group still works."""
    if backend == "gloo":
        pytest.skip("gloo's shutdown is not exercised here")
    per_rank = abort_results(backend)
    o = per_rank[0]
    assert o["destroy_s"] < SHORT_TIMEOUT_S + FAST_S, f"destroy took {o['destroy_s']:.1f}s"
    assert o["running"]["message"], "the op in progress succeeded without its peer"
    assert o["queued"]["message"], "the queued op succeeded without its peer"
    assert "destroyed" in o["queued"]["message"], o["queued"]["message"]
    for r, res in enumerate(per_rank):
        assert res["default_after"] == [3.0] * 3, f"rank {r}: {res['default_after']}"
