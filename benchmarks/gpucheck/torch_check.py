#!/usr/bin/env python3
"""torch_check: gohccl as the torch.distributed backend on CUDA tensors.

Run under torchrun, 2 processes (one GPU is enough: every rank uses
cuda:<local_rank % device_count>):

    torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29631 \\
        benchmarks/gpucheck/torch_check.py [--device cuda] [--mib 64,256]
    torchrun ... torch_check.py --mode nccl --ddp-params /tmp/ddp_gohccl.pt

`--device cpu` runs the same checks on host tensors (how the script is tried
on a machine without a GPU). benchmarks/gpucheck/run.sh runs it all.

mode main (default), every check compared against a reference computed from
every rank's inputs (each rank regenerates any rank's input):
  - all_reduce with SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM (a double and a
    tensor factor), and BAND, BOR, BXOR on int64; float32, float16, bfloat16,
    int64; 0, 1, 1001 and 3M+17 elements (the last spans many staging chunks);
    a non-contiguous tensor
  - all_gather (list), all_gather_into_tensor, reduce_scatter (list),
    reduce_scatter_tensor, broadcast, reduce, gather, scatter, all_to_all with
    uneven sizes, all_to_all_single (equal and uneven splits), send/recv,
    isend/irecv, barrier, all_gather_object, broadcast_object_list
  - async work: wait(), get_future().wait() and .then()
  - streams: the collective sees work queued before it on the caller's
    current stream (a slow kernel, then the write of the input), on the
    default stream and on a side stream, synchronous and async
  - DDP, 5 steps of SGD with momentum, over gohccl, over Gloo, and a
    single-process reference (the two ranks' gradients averaged by hand):
    parameters equal across ranks and to the reference
  - timings: an all-reduce of each --mib size through gohccl (staged), through
    Gloo on the same CUDA tensor, gohccl's host collective alone on pinned
    memory, and the copies alone (device to pinned host and back, both ranks
    at once as in the staged call); with GOHCCL_BUFFSIZE 8M (default) and 64M
mode nccl: DDP over NCCL against the same reference and against the
  parameters mode main saved (--ddp-params). NCCL refuses two ranks on one
  GPU; that refusal is reported, not failed.

Rank 0 prints PASS/FAIL per check (a check passes when it passed on every
rank) and a summary; the exit status is 1 if any check failed.
"""

import argparse
import datetime
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

RESULTS = []  # (name, ok, detail) of this rank
SIZES = (0, 1, 1001, (3 << 20) + 17)
FLOATS = (torch.float32, torch.float16, torch.bfloat16)
DTYPES = FLOATS + (torch.int64,)


def check(name, ok, detail=""):
    """Record a check; detail says why it failed (or, for a pass, a figure
    worth printing)."""
    RESULTS.append((name, bool(ok), detail))
    if not ok:  # at once too, in case the run is cut short
        print(f"rank {os.environ.get('RANK')}: FAIL: {name}: {detail}", flush=True)


def case(name):
    """Decorator: run the case now; an exception is a failed check (and the
    traceback is printed) rather than the end of the script."""
    def run(fn):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001 - report and go on
            traceback.print_exc()
            check(name, False, f"{type(exc).__name__}: {str(exc)[:300]}")
        return fn
    return run


def inp(r, n, dtype, salt, kind="sum"):
    """Rank r's input: small integers, exact in every dtype and in any
    summation order; kind "prod" draws from {-2, -1, 1, 2}."""
    g = torch.arange(n, dtype=torch.int64)
    if kind == "prod":
        v = torch.tensor([-2, -1, 1, 2])[(g * 3 + r * 5 + salt) % 4]
    else:
        v = (g * 3 + r * 7 + salt) % 19 - 9
    return v.to(dtype)


def same(got, want):
    got = got.detach().cpu()
    want = want.to(got.dtype)
    if got.shape != want.shape:
        return False, f"shape {tuple(got.shape)} != {tuple(want.shape)}"
    if torch.equal(got, want):
        return True, ""
    bad = (got != want).nonzero()
    i = tuple(bad[0].tolist())
    return False, f"{bad.shape[0]} elements differ, first at {i}: {got[i].item()} != {want[i].item()}"


def expect(name, got, want):
    ok, why = same(got, want)
    check(name, ok, why)


def dn(dtype):
    return str(dtype).replace("torch.", "")


class Ctx:
    def __init__(self, args):
        self.rank = int(os.environ["RANK"])
        self.world = int(os.environ["WORLD_SIZE"])
        self.local = int(os.environ.get("LOCAL_RANK", self.rank))
        self.cuda = args.device == "cuda"
        if self.cuda:
            self.dev = torch.device("cuda", self.local % torch.cuda.device_count())
            torch.cuda.set_device(self.dev)
        else:
            self.dev = torch.device("cpu")
        self.args = args

    def t(self, r, n, dtype, salt, kind="sum"):
        return inp(r, n, dtype, salt, kind).to(self.dev)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()


REFOPS = {
    "SUM": lambda xs: sum(x.double() for x in xs),
    "PRODUCT": lambda xs: torch.stack([x.double() for x in xs]).prod(0),
    "MIN": lambda xs: torch.stack(xs).min(0).values,
    "MAX": lambda xs: torch.stack(xs).max(0).values,
    "AVG": lambda xs: sum(x.double() for x in xs) / len(xs),
    "BAND": lambda xs: _fold(xs, torch.bitwise_and),
    "BOR": lambda xs: _fold(xs, torch.bitwise_or),
    "BXOR": lambda xs: _fold(xs, torch.bitwise_xor),
}


def _fold(xs, f):
    out = xs[0]
    for x in xs[1:]:
        out = f(out, x)
    return out


def primitives(c):
    R, W = c.rank, c.world
    for dtype in DTYPES:
        ops = ["SUM", "PRODUCT", "MIN", "MAX"] + (["AVG", "PREMUL_SUM", "PREMUL_SUM_T"] if dtype in FLOATS
                                                 else ["BAND", "BOR", "BXOR"])
        for n in SIZES:
            for op in ops:
                name = f"all_reduce {op} {dn(dtype)} n={n}"

                @case(name)
                def _():
                    kind = "prod" if op == "PRODUCT" else "sum"
                    xs = [inp(p, n, dtype, 1, kind) for p in range(W)]
                    t = c.t(R, n, dtype, 1, kind)
                    if op == "PREMUL_SUM":
                        rop = dist._make_nccl_premul_sum(2.0)
                        want = REFOPS["SUM"](xs) * 2
                    elif op == "PREMUL_SUM_T":
                        rop = dist._make_nccl_premul_sum(torch.tensor(0.5, dtype=dtype, device=c.dev))
                        want = REFOPS["SUM"](xs) * 0.5
                    else:
                        rop = getattr(dist.ReduceOp, op)
                        want = REFOPS[op](xs)
                    dist.all_reduce(t, op=rop)
                    expect(name, t, want)

        for n in SIZES:
            name = f"all_gather list {dn(dtype)} n={n}"

            @case(name)
            def _():
                outs = [torch.full((n,), 77, dtype=dtype, device=c.dev) for _ in range(W)]
                dist.all_gather(outs, c.t(R, n, dtype, 2))
                expect(name, torch.cat(outs), torch.cat([inp(p, n, dtype, 2) for p in range(W)]))

            name = f"all_gather_into_tensor {dn(dtype)} n={n}"

            @case(name)
            def _():
                out = torch.empty(W * n, dtype=dtype, device=c.dev)
                dist.all_gather_into_tensor(out, c.t(R, n, dtype, 3))
                expect(name, out, torch.cat([inp(p, n, dtype, 3) for p in range(W)]))

            for op in ("SUM", "MAX"):
                name = f"reduce_scatter list {op} {dn(dtype)} n={n}"

                @case(name)
                def _():
                    out = torch.empty(n, dtype=dtype, device=c.dev)
                    ins = [c.t(R, W * n, dtype, 4)[p * n:(p + 1) * n] for p in range(W)]
                    dist.reduce_scatter(out, ins, op=getattr(dist.ReduceOp, op))
                    want = REFOPS[op]([inp(p, W * n, dtype, 4) for p in range(W)])[R * n:(R + 1) * n]
                    expect(name, out, want)

            for op in ("SUM", "AVG") if dtype in FLOATS else ("SUM",):
                name = f"reduce_scatter_tensor {op} {dn(dtype)} n={n}"

                @case(name)
                def _():
                    out = torch.empty(n, dtype=dtype, device=c.dev)
                    dist.reduce_scatter_tensor(out, c.t(R, W * n, dtype, 5), op=getattr(dist.ReduceOp, op))
                    want = REFOPS[op]([inp(p, W * n, dtype, 5) for p in range(W)])[R * n:(R + 1) * n]
                    expect(name, out, want)

            name = f"broadcast root={W - 1} {dn(dtype)} n={n}"

            @case(name)
            def _():
                t = c.t(R, n, dtype, 6)
                dist.broadcast(t, src=W - 1)
                expect(name, t, inp(W - 1, n, dtype, 6))

            for op in ("SUM", "MAX"):
                name = f"reduce {op} dst={W - 1} {dn(dtype)} n={n}"

                @case(name)
                def _():
                    t = c.t(R, n, dtype, 7)
                    dist.reduce(t, dst=W - 1, op=getattr(dist.ReduceOp, op))
                    if R == W - 1:
                        expect(name, t, REFOPS[op]([inp(p, n, dtype, 7) for p in range(W)]))
                    else:
                        check(name, True)

            name = f"gather dst=0 {dn(dtype)} n={n}"

            @case(name)
            def _():
                g = [torch.empty(n, dtype=dtype, device=c.dev) for _ in range(W)] if R == 0 else None
                dist.gather(c.t(R, n, dtype, 8), g, dst=0)
                if R == 0:
                    expect(name, torch.cat(g), torch.cat([inp(p, n, dtype, 8) for p in range(W)]))
                else:
                    check(name, True)

            name = f"scatter src={W - 1} {dn(dtype)} n={n}"

            @case(name)
            def _():
                out = torch.full((n,), 55, dtype=dtype, device=c.dev)
                src = c.t(W - 1, W * n, dtype, 9)
                dist.scatter(out, [src[p * n:(p + 1) * n] for p in range(W)] if R == W - 1 else None, src=W - 1)
                expect(name, out, inp(W - 1, W * n, dtype, 9)[R * n:(R + 1) * n])

            # q sends p size(q, p) elements: uneven, and zero where n is small
            def size(q, p):
                return n * ((q + 2 * p) % 3 + 1) // 3

            name = f"all_to_all list uneven {dn(dtype)} n={n}"

            @case(name)
            def _():
                ins = [c.t(R, size(R, p), dtype, 10 + p) for p in range(W)]
                outs = [torch.empty(size(p, R), dtype=dtype, device=c.dev) for p in range(W)]
                dist.all_to_all(outs, ins)
                expect(name, torch.cat(outs), torch.cat([inp(p, size(p, R), dtype, 10 + R) for p in range(W)]))

            name = f"all_to_all_single equal {dn(dtype)} n={n}"

            @case(name)
            def _():
                out = torch.empty(W * n, dtype=dtype, device=c.dev)
                dist.all_to_all_single(out, c.t(R, W * n, dtype, 20))
                expect(name, out, torch.cat([inp(p, W * n, dtype, 20)[R * n:(R + 1) * n] for p in range(W)]))

            name = f"all_to_all_single uneven {dn(dtype)} n={n}"

            @case(name)
            def _():
                ssplit = [size(R, p) for p in range(W)]
                rsplit = [size(p, R) for p in range(W)]
                out = torch.empty(sum(rsplit), dtype=dtype, device=c.dev)
                dist.all_to_all_single(out, c.t(R, sum(ssplit), dtype, 21), rsplit, ssplit)
                parts = []
                for q in range(W):
                    qs = [size(q, p) for p in range(W)]
                    parts.append(inp(q, sum(qs), dtype, 21)[sum(qs[:R]):sum(qs[:R]) + qs[R]])
                expect(name, out, torch.cat(parts))

            if W > 1:
                name = f"send/recv ring {dn(dtype)} n={n}"

                @case(name)
                def _():
                    out = torch.full((n,), 33, dtype=dtype, device=c.dev)
                    nxt, prv = (R + 1) % W, (R - 1) % W
                    if R % 2 == 0:
                        dist.send(c.t(R, n, dtype, 30), nxt)
                        dist.recv(out, prv)
                    else:
                        dist.recv(out, prv)
                        dist.send(c.t(R, n, dtype, 30), nxt)
                    expect(name, out, inp(prv, n, dtype, 30))

                name = f"isend/irecv {dn(dtype)} n={n}"

                @case(name)
                def _():
                    out = torch.full((n,), 33, dtype=dtype, device=c.dev)
                    src = c.t(R, n, dtype, 31)
                    reqs = [dist.isend(src, (R + 1) % W), dist.irecv(out, (R - 1) % W)]
                    for q in reqs:
                        q.wait()
                    expect(name, out, inp((R - 1) % W, n, dtype, 31))

    @case("non-contiguous all_reduce")
    def _():
        base = c.t(R, 64 * 33, torch.float32, 40).reshape(64, 33)
        t = base.t()
        dist.all_reduce(t)
        want = sum(inp(p, 64 * 33, torch.float32, 40).reshape(64, 33) for p in range(W)).t()
        expect("non-contiguous all_reduce", t, want)

    @case("barrier")
    def _():
        dist.barrier()
        check("barrier", True)

    @case("all_gather_object")
    def _():
        got = [None] * W
        dist.all_gather_object(got, {"rank": R, "v": [R] * 3})
        check("all_gather_object", got == [{"rank": p, "v": [p] * 3} for p in range(W)], repr(got)[:200])

    @case("broadcast_object_list")
    def _():
        objs = [R, "x" * (R + 1)] if R == W - 1 else [None, None]
        dist.broadcast_object_list(objs, src=W - 1)
        check("broadcast_object_list", objs == [W - 1, "x" * W], repr(objs))


def asyncs(c):
    R, W = c.rank, c.world
    n = (1 << 20) + 3
    xs = [inp(p, n, torch.float32, 50) for p in range(W)]

    @case("async wait")
    def _():
        t = c.t(R, n, torch.float32, 50)
        w = dist.all_reduce(t, async_op=True)
        w.wait()
        expect("async wait", t, sum(xs))

    @case("async future wait")
    def _():
        t = c.t(R, n, torch.float32, 50)
        fut = dist.all_reduce(t, async_op=True).get_future()
        v = fut.wait()
        expect("async future wait", v[0], sum(xs))

    @case("async future then")
    def _():
        t = c.t(R, n, torch.float32, 50)
        fut = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
        expect("async future then", fut.wait(), sum(xs) * 2)

    @case("async several in flight")
    def _():
        ts = [c.t(R, n, torch.float32, 60 + i) for i in range(4)]
        ws = [dist.all_reduce(t, async_op=True) for t in ts]
        for w in ws:
            w.wait()
        for i, t in enumerate(ts):
            expect("async several in flight", t, sum(inp(p, n, torch.float32, 60 + i) for p in range(W)))


def streams(c):
    """The collective sees work queued before it on the current stream; work
    queued after a synchronous call (or after wait()) sees its result."""
    if not c.cuda:
        if c.rank == 0:
            print("streams: skipped on cpu", flush=True)
        return
    R, W = c.rank, c.world
    n = (4 << 20) + 5  # several chunks
    want = sum(inp(p, n, torch.float32, 70) for p in range(W))
    cycles = int(200e6)  # ~0.1 s of one SM spinning, far longer than the copy's issue

    for label, side, asyn in (("default stream", False, False), ("side stream", True, False),
                              ("side stream async", True, True), ("default stream async", False, True)):
        name = f"stream order: {label}"

        @case(name)
        def _():
            host = inp(R, n, torch.float32, 70).pin_memory()
            t = torch.zeros(n, device=c.dev)
            torch.cuda.synchronize()
            s = torch.cuda.Stream() if side else torch.cuda.current_stream()
            with torch.cuda.stream(s):
                torch.cuda._sleep(cycles)  # the input is written only after this
                t.copy_(host, non_blocking=True)
                w = dist.all_reduce(t, async_op=asyn)
                if asyn:
                    w.wait()
                after = t * 2  # queued on s after the call
            s.synchronize()
            expect(name, after, want * 2)

    @case("stream: result seen from another stream after wait")
    def _():
        t = c.t(R, n, torch.float32, 70)
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            w = dist.all_reduce(t, async_op=True)
        w.wait()
        other = torch.cuda.Stream()
        with torch.cuda.stream(other):
            after = t + 0
        other.synchronize()
        expect("stream: result seen from another stream after wait", after, want)


def make_model(dev):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                               torch.nn.Linear(64, 4)).to(dev)


def batch(step, r, dev):
    g = torch.Generator().manual_seed(1000 * step + r)
    return torch.randn(16, 32, generator=g).to(dev), torch.randn(16, 4, generator=g).to(dev)


STEPS = 5


def ddp_train(c, group):
    model = make_model(c.dev)
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[c.dev.index] if c.cuda else None,
                                                    process_group=group, bucket_cap_mb=0.01)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    for step in range(STEPS):
        x, y = batch(step, c.rank, c.dev)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    c.sync()
    return torch.cat([p.detach().cpu().reshape(-1) for p in model.parameters()])


def ddp_reference(c):
    """One process: each rank's gradients computed apart, averaged by hand."""
    model = make_model(c.dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(STEPS):
        grads = []
        for r in range(c.world):
            x, y = batch(step, r, c.dev)
            model.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for i, p in enumerate(model.parameters()):
            p.grad = sum(g[i] for g in grads) / c.world
        opt.step()
    c.sync()
    return torch.cat([p.detach().cpu().reshape(-1) for p in model.parameters()])


def maxdiff(a, b):
    return (a - b).abs().max().item()


def ddp(c, gloo):
    ref = ddp_reference(c)
    mine = ddp_train(c, dist.group.WORLD)
    theirs = ddp_train(c, gloo)
    everyone = [None] * c.world
    dist.all_gather_object(everyone, mine, group=gloo)
    tol = 1e-6
    d_ref, d_gloo = maxdiff(mine, ref), maxdiff(mine, theirs)
    check("DDP gohccl == reference", d_ref <= tol, f"max |diff| {d_ref:g} (tolerance {tol})")
    check("DDP gohccl == Gloo", d_gloo <= tol, f"max |diff| {d_gloo:g} (tolerance {tol})")
    check("DDP gohccl: parameters identical on every rank", all(torch.equal(e, mine) for e in everyone))
    check("DDP parameters moved from their initial values",
          maxdiff(mine, torch.cat([p.detach().cpu().reshape(-1) for p in make_model(c.dev).parameters()])) > 1e-3)
    if c.args.ddp_params and c.rank == 0:
        torch.save({"gohccl": mine, "reference": ref}, c.args.ddp_params)


def timings(c, gloo):
    """All-reduce of --mib sizes: staged (gohccl on the CUDA tensor), Gloo on
    the same tensor, gohccl's host collective alone, the copies alone."""
    rows = []
    sizes = [int(s) for s in c.args.mib.split(",") if s]
    groups = [("8M (default)", dist.group.WORLD)]
    if c.cuda:
        old = os.environ.get("GOHCCL_BUFFSIZE")
        os.environ["GOHCCL_BUFFSIZE"] = "64M"
        groups.append(("64M", dist.new_group(backend="gohccl")))
        if old is None:
            del os.environ["GOHCCL_BUFFSIZE"]
        else:
            os.environ["GOHCCL_BUFFSIZE"] = old

    def clock(f):
        f()
        ts = []
        for _ in range(c.args.iters):
            dist.barrier(group=gloo)
            c.sync()
            t0 = time.perf_counter()
            f()
            c.sync()
            ts.append(time.perf_counter() - t0)
        ts.sort()
        return ts[len(ts) // 2] * 1e3

    for mib in sizes:
        n = mib << 18
        x = torch.ones(n, device=c.dev)
        h = torch.ones(n, pin_memory=c.cuda)
        row = {"MiB": mib}
        for label, g in groups:
            row[f"staged {label}"] = clock(lambda: dist.all_reduce(x, group=g))
        row["gloo"] = clock(lambda: dist.all_reduce(x, group=gloo))
        row["host"] = clock(lambda: dist.all_reduce(h))
        if c.cuda:
            def copies():
                h.copy_(x, non_blocking=True)
                x.copy_(h, non_blocking=True)
            row["copies"] = clock(copies)
            row["copies down"] = clock(lambda: h.copy_(x, non_blocking=True))
        rows.append(row)
        del x, h
        if c.cuda:
            torch.cuda.empty_cache()
    return rows


def report(c, gloo, rows):
    everyone = [None] * c.world
    dist.all_gather_object(everyone, RESULTS, group=gloo)
    if c.rank != 0:
        return 0
    names, by, notes = [], {}, {}
    for r, res in enumerate(everyone):
        for name, ok, detail in res:
            if name not in by:
                names.append(name)
                by[name] = []
            if not ok:
                by[name].append(f"rank {r}: {detail}")
            elif detail and r == 0:
                notes[name] = detail
    failed = [n for n in names if by[n]]
    for n in names:
        tail = "  [" + "; ".join(by[n]) + "]" if by[n] else (f"  ({notes[n]})" if n in notes else "")
        print(("FAIL " if by[n] else "PASS ") + n + tail, flush=True)
    for row in rows:
        mib = row["MiB"]
        cells = ", ".join(f"{k} {v:.2f} ms" for k, v in row.items() if k != "MiB")
        print(f"TIME all_reduce float32 {mib} MiB, median of {c.args.iters}, rank 0: {cells}", flush=True)
        if "copies" in row:
            st = row["staged 8M (default)"]
            mx, sm = max(row["copies"], row["host"]), row["copies"] + row["host"]
            gb = 2 * (mib << 20) / (row["copies"] * 1e-3) / 1e9
            print(f"TIME   {mib} MiB: staged {st:.2f} ms = {st / mx:.2f}x max(copies, host) {mx:.2f} ms, "
                  f"{st / sm:.2f}x copies + host {sm:.2f} ms; staged 64M {row.get('staged 64M', float('nan')):.2f} ms; "
                  f"gloo {row['gloo']:.2f} ms; copies move {gb:.1f} GB/s per rank", flush=True)
    print(f"SUMMARY torch_check ({c.args.device}, {c.world} ranks): {len(names) - len(failed)} passed, "
          f"{len(failed)} failed", flush=True)
    return 1 if failed else 0


def nccl_mode(c):
    try:
        dist.init_process_group("nccl", device_id=c.dev, timeout=datetime.timedelta(seconds=60))
        mine = ddp_train(c, dist.group.WORLD)
    except Exception as exc:  # noqa: BLE001 - NCCL refuses 2 ranks on one GPU
        if c.rank == 0:
            print(f"NCCL: not usable here: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}", flush=True)
        return 0
    ref = ddp_reference(c)
    saved = torch.load(c.args.ddp_params) if c.args.ddp_params and os.path.exists(c.args.ddp_params) else None
    if c.rank == 0:
        d = maxdiff(mine, ref)
        print(("PASS" if d <= 1e-6 else "FAIL") + f" DDP NCCL == reference (max |diff| {d:.3g})", flush=True)
        if saved is not None:
            d = maxdiff(mine, saved["gohccl"])
            print(("PASS" if d <= 1e-6 else "FAIL") + f" DDP NCCL == DDP gohccl (max |diff| {d:.3g})", flush=True)
    dist.destroy_process_group()
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--mode", choices=("main", "nccl"), default="main")
    ap.add_argument("--mib", default="64,256", help="sizes of the timed all-reduce, comma-separated ('' for none)")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--ddp-params", help="where mode main saves its DDP parameters, mode nccl reads them")
    ap.add_argument("--skip", default="", help="comma-separated parts to skip: primitives,async,streams,ddp,timings")
    args = ap.parse_args()
    c = Ctx(args)
    if args.mode == "nccl":
        return nccl_mode(c)
    import gohccl  # noqa: F401 - registers the backend
    if c.rank == 0:
        print(f"torch {torch.__version__}, cuda {torch.version.cuda}, "
              f"{torch.cuda.get_device_name(c.dev) if c.cuda else 'cpu'}; gohccl {gohccl.__version__} from "
              f"{os.path.dirname(gohccl.__file__)}; {c.world} ranks on {c.dev}", flush=True)
    dist.init_process_group("gohccl", timeout=datetime.timedelta(seconds=float(os.environ.get("GPUCHECK_TIMEOUT", "90"))))
    gloo = dist.new_group(backend="gloo")
    skip = set(args.skip.split(","))
    t0 = time.time()
    for part, fn in (("primitives", lambda: primitives(c)), ("async", lambda: asyncs(c)),
                     ("streams", lambda: streams(c)), ("ddp", lambda: ddp(c, gloo))):
        if part in skip:
            continue
        try:
            fn()
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            check(part, False, f"{type(exc).__name__}: {exc}")
        if c.rank == 0:
            bad = sum(1 for _, ok, _ in RESULTS if not ok)
            print(f"part {part} done at {time.time() - t0:.1f} s: rank 0 so far {len(RESULTS) - bad} passed, "
                  f"{bad} failed", flush=True)
    rows = []
    if "timings" not in skip:
        try:
            rows = timings(c, gloo)
        except Exception as exc:  # noqa: BLE001
            traceback.print_exc()
            check("timings", False, f"{type(exc).__name__}: {exc}")
    rc = report(c, gloo, rows)
    dist.destroy_process_group()
    return rc


if __name__ == "__main__":
    sys.exit(main())
