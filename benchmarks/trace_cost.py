"""The flight recorder's cost through torch (docs/trace.md): a 4 KiB float32
all_reduce on 2 ranks, on a group with the recorder off (GOHCCL_TRACE_BUFFER=0)
and one with it on (default), rounds of 200 calls alternating between them.

    .venv/bin/python benchmarks/trace_cost.py [ROUNDS]
"""
import os, sys, statistics
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from harness import launch


def job(ctx, rounds):
    import os, time, torch, torch.distributed as dist
    os.environ["GOHCCL_TRACE_BUFFER"] = "0"
    off = dist.new_group([0, 1])
    del os.environ["GOHCCL_TRACE_BUFFER"]
    on = dist.new_group([0, 1])
    t = torch.ones(1024)
    for g in (off, on):
        for _ in range(300):
            dist.all_reduce(t, group=g)
    res = {"off": [], "on": []}
    for _ in range(rounds):
        for name, g in (("off", off), ("on", on)):
            t0 = time.perf_counter()
            for _ in range(200):
                dist.all_reduce(t, group=g)
            res[name].append((time.perf_counter() - t0) / 200 * 1e6)
    return res


if __name__ == "__main__":
    out = launch(job, 2, "gohccl", args=(int(sys.argv[1]) if len(sys.argv) > 1 else 30,), timeout=300)
    r = out[0]
    off, on = statistics.median(r["off"]), statistics.median(r["on"])
    ratios = [b / a for a, b in zip(r["off"], r["on"])]
    print(f"rank 0, {len(r['off'])} rounds x 200 calls: median off {off:.2f} us, on {on:.2f} us, "
          f"on/off {on/off:.3f}; per-round ratio median {statistics.median(ratios):.3f}, "
          f"quartiles {statistics.quantiles(ratios, n=4)[0]:.3f}-{statistics.quantiles(ratios, n=4)[2]:.3f}")
