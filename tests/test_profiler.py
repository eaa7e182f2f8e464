"""torch.profiler sees gohccl's collectives as it sees Gloo's: an event named
"<backend>:all_reduce" (and so on) carrying the input's shape, for
synchronous and asynchronous calls. The same test runs on Gloo, whose names
are the reference."""

import pytest

from harness import attempt, launch_cached

pytestmark = pytest.mark.timeout(240)
WORLD = 2

# (torch API, event suffix, input shape recorded)
CALLS = [
    ("all_reduce", "all_reduce", [1000]),
    ("all_reduce_async", "all_reduce", [7]),
    ("broadcast", "broadcast", [33]),
    ("all_gather", "all_gather", [5]),
]


def _sweep(ctx):
    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile

    def one(call):
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            if call == "all_reduce":
                dist.all_reduce(torch.ones(1000))
            elif call == "all_reduce_async":
                dist.all_reduce(torch.ones(7), async_op=True).wait()
            elif call == "broadcast":
                dist.broadcast(torch.ones(33), src=0)
            elif call == "all_gather":
                dist.all_gather([torch.empty(5) for _ in range(ctx.world_size)], torch.ones(5))
        return [(e.name, [list(s) for s in e.input_shapes]) for e in prof.events()]

    return {call: attempt(one, call) for call, _, _ in CALLS}


@pytest.mark.parametrize("call,suffix,shape", CALLS, ids=[c[0] for c in CALLS])
def test_collective_is_in_the_trace(backend, call, suffix, shape):
    res = launch_cached("profiler", _sweep, WORLD, backend, timeout=180)
    name = f"{backend}:{suffix}"
    for r, per_rank in enumerate(res):
        events = per_rank[call]
        assert not (isinstance(events, dict) and "__error__" in events), events
        mine = [shapes for n, shapes in events if n == name]
        assert mine, f"rank {r}: no {name!r} event in {sorted({n for n, _ in events})}"
        assert shape in mine[0], f"rank {r}: {name} recorded shapes {mine[0]}, expected {shape}"
