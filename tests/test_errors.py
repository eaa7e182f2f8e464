"""Errors: bad input refused at call time with a clear message (and the group
still works afterwards), a peer that never joins (timeouts name the op and
come back in bounded time), and destroy_process_group + init again."""

import os
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
