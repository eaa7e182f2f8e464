"""async_op=True: Work.wait / is_completed / get_future, many ops in flight,
future callbacks, and an async op that fails (a peer never joins)."""

import pytest

from harness import attempt, case_results, launch_cached, skip_reason

TIMEOUT = 240
ASYNC_WORLDS = [2, 3]
FAIL_TIMEOUT_S = 3.0
N_IN_FLIGHT = 20

pytestmark = pytest.mark.timeout(TIMEOUT + 60)
worlds = pytest.mark.parametrize("world", ASYNC_WORLDS, ids=lambda w: f"w{w}")


def val(rank, i):
    return float(rank + 1) * (i + 1)


def _basic(ctx):
    import torch
    import torch.distributed as dist
    t = torch.full((1000,), float(ctx.rank + 1))
    w = dist.all_reduce(t, async_op=True)
    ret = w.wait()
    return {"ret": ret, "completed": w.is_completed(), "value": t[:3].tolist(),
            "exception": repr(w.exception()) if hasattr(w, "exception") else "None"}


def _future(ctx):
    import torch
    import torch.distributed as dist
    t = torch.full((17,), float(ctx.rank + 1), dtype=torch.float64)
    w = dist.all_reduce(t, async_op=True)
    fut = w.get_future()
    waited = fut.wait()
    value = fut.value()
    return {"waited": [x.tolist() for x in waited], "value": [x.tolist() for x in value],
            "done": fut.done(), "same_storage": waited[0].data_ptr() == t.data_ptr(),
            "completed": w.is_completed()}


def _in_flight(ctx, reverse):
    """N all_reduces issued before any is waited; completion order recorded
    by callbacks on their futures."""
    import torch
    import torch.distributed as dist
    r = ctx.rank
    ts = [torch.full((257,), val(r, i)) for i in range(N_IN_FLIGHT)]
    order = []
    works = []
    for i, t in enumerate(ts):
        w = dist.all_reduce(t, async_op=True)
        w.get_future().add_done_callback(lambda f, i=i: order.append(i))
        works.append(w)
    for w in (reversed(works) if reverse else works):
        w.wait()
    # The callbacks may run on the backend's thread just after wait() returns.
    import time
    deadline = time.time() + 10
    while len(order) < N_IN_FLIGHT and time.time() < deadline:
        time.sleep(0.01)
    return {"values": [t[0].item() for t in ts], "ends": [t[-1].item() for t in ts],
            "order": list(order)}


def _mixed(ctx):
    """Different collectives in flight together."""
    import torch
    import torch.distributed as dist
    ws, r = ctx.world_size, ctx.rank
    gathered = [torch.zeros(3) for _ in range(ws)]
    bc = torch.full((4,), float(r))
    rs_out = torch.zeros(2)
    a2a_out = torch.zeros(ws)
    works = [
        dist.all_gather(gathered, torch.full((3,), float(r + 1)), async_op=True),
        dist.broadcast(bc, src=ws - 1, async_op=True),
        dist.reduce_scatter_tensor(rs_out, torch.arange(2.0 * ws) + r, async_op=True),
        dist.all_to_all_single(a2a_out, torch.arange(float(ws)) + 10 * r, async_op=True),
        dist.barrier(async_op=True),
    ]
    for w in works:
        w.wait()
    return {"gathered": [g.tolist() for g in gathered], "bcast": bc.tolist(),
            "rs": rs_out.tolist(), "a2a": a2a_out.tolist()}


def _then(ctx):
    import torch
    import torch.distributed as dist
    calls = []
    t = torch.full((5,), float(ctx.rank + 1))
    fut = dist.all_reduce(t, async_op=True).get_future()

    def double(f):
        calls.append("double")
        return f.value()[0] * 2

    def plus_one(f):
        calls.append("plus_one")
        return f.value() + 1

    chained = fut.then(double).then(plus_one)
    result = chained.wait()
    # Futures returned by a collective with async_op=True from the functional
    # API, too: dist.all_reduce(...).get_future() is the c10d future.
    fut2 = dist.all_reduce(torch.ones(2), async_op=True).get_future()
    seen = []
    fut2.add_done_callback(lambda f: seen.append(f.value()[0].tolist()))
    fut2.wait()
    import time
    deadline = time.time() + 10
    while not seen and time.time() < deadline:
        time.sleep(0.01)
    return {"result": result.tolist(), "calls": calls, "seen": seen}


def _failure(ctx):
    """Rank 0 all_reduces on a [0, 1] group with a short timeout; rank 1
    never joins. wait(), the future and a callback must all report it."""
    import datetime
    import time
    import torch
    import torch.distributed as dist
    r = ctx.rank
    g = dist.new_group([0, 1], timeout=datetime.timedelta(seconds=FAIL_TIMEOUT_S))
    store = ctx.store()
    out = {}
    if r == 0:
        t = torch.ones(8)
        start = time.time()
        try:
            w = dist.all_reduce(t, group=g, async_op=True)
        except Exception as exc:  # noqa: BLE001
            out["issue_raised"] = f"{type(exc).__name__}: {exc}"
            store.set("async_failure_done", "1")
            return out
        fut = w.get_future()
        try:
            w.wait()
            out["wait"] = None
        except Exception as exc:  # noqa: BLE001
            out["wait"] = f"{type(exc).__name__}: {exc}"
        out["elapsed"] = time.time() - start
        try:
            fut.wait()
            out["future"] = None
        except Exception as exc:  # noqa: BLE001
            out["future"] = f"{type(exc).__name__}: {exc}"

        def cb(f):
            return f.value()
        try:
            fut.then(cb).wait()
            out["then"] = None
        except Exception as exc:  # noqa: BLE001
            out["then"] = f"{type(exc).__name__}: {exc}"
        out["completed"] = w.is_completed()
        store.set("async_failure_done", "1")
    elif r == 1:
        store.wait(["async_failure_done"])
    # The world group is a different communicator: it must still work.
    t = torch.full((3,), float(r + 1))
    dist.all_reduce(t)
    out["world_after"] = t.tolist()
    return out


def async_sweep(ctx):
    out = {
        "basic": attempt(_basic, ctx),
        "future": attempt(_future, ctx),
        "in_flight": attempt(_in_flight, ctx, False),
        "in_flight_reverse_wait": attempt(_in_flight, ctx, True),
        "mixed": attempt(_mixed, ctx),
        "then": attempt(_then, ctx),
    }
    if ctx.world_size == 2:
        out["failure"] = attempt(_failure, ctx)
    return out


def results(backend, world):
    # destroy=False: rank 0 holds a timed-out group; tearing it down is not
    # what this file tests (test_errors.py covers destroy/re-init).
    return launch_cached("async", async_sweep, world, backend, timeout=TIMEOUT, destroy=False)


def total(world, i=0):
    return sum(val(r, i) for r in range(world))


@worlds
def test_wait_and_is_completed(backend, world):
    for r, o in enumerate(case_results(results(backend, world), "basic", "basic")):
        assert o["ret"] is True, f"rank {r}: Work.wait() returned {o['ret']!r}"
        assert o["completed"], f"rank {r}: is_completed() False after wait()"
        assert o["value"] == [total(world)] * 3, f"rank {r}: {o['value']}"
        assert o["exception"] == "None", f"rank {r}: exception() on success: {o['exception']}"


@worlds
def test_get_future(backend, world):
    for r, o in enumerate(case_results(results(backend, world), "future", "future")):
        want = [[total(world)] * 17]
        assert o["waited"] == want, f"rank {r}: future.wait() gave {o['waited']}"
        assert o["value"] == want, f"rank {r}: future.value() gave {o['value']}"
        # Only future.done() is promised here: Work.is_completed() may lag the
        # future by a moment (gloo sets it after completing the future).
        assert o["done"], f"rank {r}: future.done() False after wait(): {o}"
        assert o["same_storage"], f"rank {r}: the future's tensor is not the input tensor"


@worlds
@pytest.mark.parametrize("case", ["in_flight", "in_flight_reverse_wait"])
def test_many_in_flight(backend, world, case):
    for r, o in enumerate(case_results(results(backend, world), case, case)):
        want = [total(world, i) for i in range(N_IN_FLIGHT)]
        assert o["values"] == want, f"rank {r}: {o['values']}"
        assert o["ends"] == want, f"rank {r}: last elements {o['ends']}"
        assert sorted(o["order"]) == list(range(N_IN_FLIGHT)), (
            f"rank {r}: callbacks ran for {sorted(o['order'])}")


@worlds
def test_completion_in_issue_order(backend, world):
    reason = skip_reason(backend, feature="completion_order")
    if reason:
        pytest.skip(reason)
    for r, o in enumerate(case_results(results(backend, world), "in_flight", "in_flight")):
        assert o["order"] == list(range(N_IN_FLIGHT)), f"rank {r}: completion order {o['order']}"


@worlds
def test_mixed_collectives_in_flight(backend, world):
    for r, o in enumerate(case_results(results(backend, world), "mixed", "mixed")):
        assert o["gathered"] == [[float(j + 1)] * 3 for j in range(world)], f"rank {r}: {o}"
        assert o["bcast"] == [float(world - 1)] * 4, f"rank {r}: {o}"
        full = [sum(float(i + q) for q in range(world)) for i in range(2 * world)]
        assert o["rs"] == full[2 * r:2 * r + 2], f"rank {r}: reduce_scatter {o['rs']}"
        assert o["a2a"] == [float(r + 10 * j) for j in range(world)], f"rank {r}: a2a {o['a2a']}"


@worlds
def test_future_then_callbacks(backend, world):
    for r, o in enumerate(case_results(results(backend, world), "then", "then")):
        assert o["result"] == [total(world) * 2 + 1] * 5, f"rank {r}: {o['result']}"
        assert o["calls"] == ["double", "plus_one"], f"rank {r}: callbacks {o['calls']}"
        assert o["seen"] == [[float(world)] * 2], f"rank {r}: add_done_callback saw {o['seen']}"


def test_async_failure_reported(backend):
    per_rank = case_results(results(backend, 2), "failure", "failure")
    o = per_rank[0]
    assert "issue_raised" not in o, f"issuing the op raised at once: {o['issue_raised']}"
    for field in ("wait", "future", "then"):
        msg = o[field]
        assert msg, f"{field}: a timed-out async all_reduce reported success"
        low = msg.lower()
        assert any(w in low for w in ("timeout", "timed out", "deadline")), (
            f"{field}: message does not say it timed out: {msg}")
    assert o["elapsed"] < 15, f"the failure took {o['elapsed']:.1f}s with a {FAIL_TIMEOUT_S}s timeout"
    assert o["completed"], "is_completed() False after the op failed"
    for r, p in enumerate(per_rank):
        assert p["world_after"] == [3.0] * 3, f"rank {r}: world all_reduce after the failure: {p}"
