"""The main job: train a small model with DistributedDataParallel over gohccl.

Run by `make demo` as `torchrun --standalone --nproc-per-node 2 benchmarks/demo_ddp.py`.
It prints the loss and the time spent in gradient all-reduces per step, checks
that every rank ends with bitwise-identical parameters, then times all_reduce
against Gloo in the same job (the two interleaved, so drift cancels).
"""

import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn

import gohccl  # noqa: F401  registers the "gohccl" backend


def log(*args):
    if dist.get_rank() == 0:
        print(*args, flush=True)


class CommTimer:
    """State of timed_allreduce: seconds spent in gradient all-reduces."""

    def __init__(self):
        self.seconds = 0.0


def timed_allreduce(state, bucket):
    """A DDP comm hook: average the bucket with all_reduce, timing it into state."""
    world = dist.get_world_size()
    t0 = time.perf_counter()
    fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()

    def done(f):
        state.seconds += time.perf_counter() - t0
        return f.value()[0].div_(world)

    return fut.then(done)


def train(steps):
    torch.manual_seed(0)  # same initial model everywhere (DDP also broadcasts it)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 1))
    ddp = nn.parallel.DistributedDataParallel(model)
    hook = CommTimer()
    ddp.register_comm_hook(hook, timed_allreduce)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.02)
    gen = torch.Generator().manual_seed(1234 + dist.get_rank())  # each rank its own shard
    w_true = torch.randn(64, 1, generator=torch.Generator().manual_seed(7)) / 8  # unit-variance targets
    log(f"training a {sum(p.numel() for p in model.parameters())}-parameter MLP with DDP on "
        f"{dist.get_world_size()} ranks over {dist.get_backend()}")
    for step in range(steps):
        x = torch.randn(128, 64, generator=gen)
        y = x @ w_true + 0.01 * torch.randn(128, 1, generator=gen)
        hook.seconds = 0.0
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        total = time.perf_counter() - t0
        log(f"step {step:3d}  loss {loss.item():9.5f}  step {total * 1e3:7.2f} ms  all-reduce {hook.seconds * 1e3:6.2f} ms")
    # Every rank must hold the same bits.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    same = all(torch.equal(gathered[0], g) for g in gathered)
    log(f"parameters bitwise identical on all ranks: {same}")
    if not same:
        raise SystemExit("parameters diverged between ranks")


def time_op(fn, iters):
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def compare_with_gloo(sizes, iters):
    gloo = dist.new_group(backend="gloo")
    world = dist.get_world_size()
    log("\nall_reduce float32 sum, median of %d, interleaved with Gloo in this job" % iters)
    log(f"{'bytes':>10} {'gohccl us':>11} {'gloo us':>11} {'speedup':>8} {'busbw GB/s':>11}")
    for nbytes in sizes:
        t = torch.ones(nbytes // 4)
        for _ in range(2):  # warm up both
            dist.all_reduce(t)
            dist.all_reduce(t, group=gloo)
        ours, theirs = [], []
        for _ in range(iters):  # A B A B: drift hits both alike
            ours.append(time_op(lambda: dist.all_reduce(t), 1))
            theirs.append(time_op(lambda: dist.all_reduce(t, group=gloo), 1))
        # Every rank reports its median; the slowest rank's is the op's time.
        m = torch.tensor([statistics.median(ours), statistics.median(theirs)], dtype=torch.float64)
        dist.all_reduce(m, op=dist.ReduceOp.MAX)
        busbw = nbytes * 2 * (world - 1) / world / m[0].item() / 1e9
        log(f"{nbytes:>10} {m[0].item() * 1e6:>11.1f} {m[1].item() * 1e6:>11.1f} "
            f"{m[1].item() / m[0].item():>7.2f}x {busbw:>11.2f}")
    dist.destroy_process_group(gloo)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    dist.init_process_group("gohccl")
    try:
        train(args.steps)
        compare_with_gloo([4 << 10, 64 << 10, 1 << 20, 16 << 20], args.iters)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
