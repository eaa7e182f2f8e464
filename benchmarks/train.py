"""DDP training throughput with gohccl and with Gloo, alternating in one job.

    .venv/bin/python benchmarks/train.py                    # quick: 2 and 4 ranks, both models
    .venv/bin/python benchmarks/train.py --long             # several hundred steps per run
    .venv/bin/python benchmarks/train.py --nprocs 2 --models gpt --runs 5 --steps 40
    torchrun --standalone --nproc-per-node 2 benchmarks/train.py --worker ...   # one job by hand

Models, on synthetic data (nothing is downloaded):
  gpt   a GPT-style decoder-only transformer LM: token and position
        embeddings, pre-norm blocks of causal self-attention and an MLP, the
        head tied to the token embedding (about 6.8M parameters at the
        defaults); throughput in tokens/s over all ranks.
  cnn   a small convolutional net on 32x32 RGB images (CIFAR-sized, 10
        classes); throughput in samples/s over all ranks.

Each job (one torchrun per rank count) creates a gohccl and a Gloo process
group and trains each model in runs: gohccl, Gloo, Gloo, gohccl, ... (the order
flips every pair, so drift moves both alike), every run from the same initial
weights and data, warm-up steps untimed, then --steps timed. A run's
throughput is global samples (or tokens) over the slowest rank's wall time.
The figures are medians over runs; the ratio is the median of the per-pair
ratios (each pair ran back to back).

Communication, two ways:
  exposed   1 - (step time without communication) / (step time): each pair
            is followed by a run under DDP's no_sync() (same model, same
            data, no gradient all-reduce), the compute-only step time. This is
            what communication adds to a step that overlap did not hide.
  in flight the gradient buckets' all-reduce time, from launch to completion
            of each bucket's future (a comm hook wraps DDP's all-reduce),
            summed per step, as a share of the step; it overlaps backward, so
            it shows how long the collectives ran, not what they cost.

torch's intra-op threads are set as a user would: cores / ranks (at least 1),
cores being the CPUs this process may run on. The load average is printed
beside every result: on a shared machine only the interleaved ratio is
meaningful.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

QUICK = dict(runs=3, warmup=2, steps=8)
LONG = dict(runs=5, warmup=20, steps=300)


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nprocs", default="2,4", help="rank counts, one job each (default 2,4)")
    p.add_argument("--models", default="gpt,cnn", help="comma list of gpt, cnn (default both)")
    p.add_argument("--long", action="store_true",
                   help=f"the long run: {LONG['runs']} runs per backend of {LONG['warmup']} "
                        f"warm-up + {LONG['steps']} steps (quick: {QUICK['runs']} runs, "
                        f"{QUICK['warmup']} + {QUICK['steps']})")
    p.add_argument("--runs", type=int, default=None, help="runs per backend and model")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps per run")
    p.add_argument("--steps", type=int, default=None, help="timed steps per run")
    p.add_argument("--batch", type=int, default=None,
                   help="per-rank batch (default gpt 4 sequences, cnn 32 images)")
    p.add_argument("--seq", type=int, default=128, help="gpt sequence length (default 128)")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--json", metavar="FILE", help="write every run and the summary")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per job")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    preset = LONG if a.long else QUICK
    for k, v in preset.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    a.models = [m.strip() for m in a.models.split(",") if m.strip()]
    bad = [m for m in a.models if m not in ("gpt", "cnn")]
    if bad or not a.models:
        p.error(f"--models: unknown {', '.join(bad) or 'empty list'}; choose gpt, cnn")
    try:
        a.nprocs = [int(x) for x in a.nprocs.split(",") if x.strip()]
    except ValueError:
        p.error(f"--nprocs {a.nprocs!r}: a comma list of whole numbers")
    if not a.nprocs or min(a.nprocs) < 1:
        p.error("--nprocs: each rank count must be at least 1")
    if a.runs < 1 or a.steps < 1 or a.warmup < 0:
        p.error("--runs and --steps must be at least 1, --warmup at least 0")
    return a


# --------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------

def build_model(name: str, seq: int):
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self, d, heads):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
            self.heads = heads

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
            return x + self.mlp(self.ln2(x))

    class GPT(nn.Module):
        def __init__(self, vocab=8192, d=256, layers=6, heads=4, seq=128):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(seq, d)
            self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
            self.ln = nn.LayerNorm(d)
            self.vocab = vocab

        def forward(self, idx):
            t = idx.shape[1]
            x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.ln(x) @ self.tok.weight.t()  # head tied to the embedding

    class CNN(nn.Module):
        def __init__(self, classes=10):
            super().__init__()

            def stage(i, o):
                return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),
                                     nn.Conv2d(o, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU(),
                                     nn.MaxPool2d(2))
            self.features = nn.Sequential(stage(3, 32), stage(32, 64), stage(64, 128))
            self.head = nn.Linear(128 * 4 * 4, classes)

        def forward(self, x):
            return self.head(self.features(x).flatten(1))

    if name == "gpt":
        return GPT(seq=seq)
    return CNN()


def make_batches(name: str, batch: int, seq: int, rank: int, count: int):
    """count synthetic batches for this rank, the same on every call: gpt
    token ids with a learnable pattern (each next token a function of the
    current one, plus noise), cnn images whose class shifts their mean."""
    import torch
    g = torch.Generator().manual_seed(1000 + rank)
    out = []
    for _ in range(count):
        if name == "gpt":
            first = torch.randint(0, 8192, (batch, 1), generator=g)
            steps = torch.randint(0, 3, (batch, seq), generator=g)
            idx = (first + torch.cumsum(steps * 97 + 1, dim=1)) % 8192
            out.append((idx[:, :-1].contiguous(), idx[:, 1:].contiguous()))
        else:
            y = torch.randint(0, 10, (batch,), generator=g)
            x = torch.randn(batch, 3, 32, 32, generator=g) + y.view(-1, 1, 1, 1) * 0.1
            out.append((x, y))
    return out


# --------------------------------------------------------------------------
# One rank of a job
# --------------------------------------------------------------------------

class HookTimer:
    """State of timed_allreduce: seconds from each bucket's launch to the
    completion of its future, summed."""

    def __init__(self, group):
        self.group, self.seconds = group, 0.0


def timed_allreduce(state: HookTimer, bucket):
    """A DDP comm hook doing what DDP's default does (all_reduce, then divide
    by the world size), timing each bucket from launch to completion."""
    import torch.distributed as dist
    world = dist.get_world_size(state.group)
    t0 = time.perf_counter()
    fut = dist.all_reduce(bucket.buffer(), group=state.group, async_op=True).get_future()

    def done(f):
        state.seconds += time.perf_counter() - t0
        return f.value()[0].div_(world)

    return fut.then(done)


def run_once(name, backend, group, ctl, args, batches, sync: bool):
    """run_once trains a fresh model (same initial weights everywhere and on
    every run) for warmup + steps steps and returns its timings and a digest
    of the final weights."""
    import contextlib

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = build_model(name, args.seq)
    ddp = DDP(model, process_group=group)
    timer = HookTimer(group)
    ddp.register_comm_hook(timer, timed_allreduce)
    net = torch.compile(ddp) if args.compile else ddp
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01 if name == "gpt" else 0.05, momentum=0.9)

    def step(i):
        x, y = batches[i % len(batches)]
        opt.zero_grad(set_to_none=True)
        ctx = contextlib.nullcontext() if sync else ddp.no_sync()
        with ctx:
            out = net(x)
            if name == "gpt":
                loss = F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))
            else:
                loss = F.cross_entropy(out, y)
            loss.backward()
        opt.step()
        return loss

    for i in range(args.warmup):
        step(i)
    dist.barrier(group=ctl)
    timer.seconds = 0.0
    t0 = time.perf_counter()
    for i in range(args.steps):
        loss = step(args.warmup + i)
    elapsed = time.perf_counter() - t0
    t = torch.tensor([elapsed, timer.seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctl)
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).to(torch.float64)
    digest = torch.tensor([float(flat.sum()), float(flat.abs().sum())], dtype=torch.float64)
    lo, hi = digest.clone(), digest.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN, group=ctl)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=ctl)
    if sync and not torch.equal(lo, hi):
        raise SystemExit(f"{name} over {backend}: the ranks' weights differ after training")
    return {"seconds": float(t[0]), "comm_in_flight_s": float(t[1]), "loss": float(loss),
            "weights_sum": float(lo[0])}


def worker(args) -> int:
    import warnings
    warnings.filterwarnings("ignore")
    import torch
    import torch.distributed as dist

    import gohccl  # noqa: F401 - registers the backend

    world = int(os.environ["WORLD_SIZE"])
    rank = int(os.environ["RANK"])
    threads = max(1, usable_cpus() // world)
    torch.set_num_threads(threads)
    dist.init_process_group("gloo")
    ctl = dist.group.WORLD
    groups = {"gohccl": dist.new_group(backend="gohccl"), "gloo": dist.new_group(backend="gloo")}
    out = []
    for name in args.models:
        batch = args.batch or (4 if name == "gpt" else 32)
        per_step = batch * world * (args.seq if name == "gpt" else 1)
        unit = "tokens/s" if name == "gpt" else "samples/s"
        batches = make_batches(name, batch, args.seq + 1, rank, 8)
        params = sum(p.numel() for p in build_model(name, args.seq).parameters())
        runs = []
        for r in range(args.runs):
            order = ("gohccl", "gloo") if r % 2 == 0 else ("gloo", "gohccl")
            load = os.getloadavg()[0]
            pair = {}
            for backend in order:
                res = run_once(name, backend, groups[backend], ctl, args, batches, True)
                res.update(backend=backend, run=r, sync=True, load=load,
                           throughput=per_step * args.steps / res["seconds"])
                pair[backend] = res
                runs.append(res)
            local = run_once(name, "none", groups["gloo"], ctl, args, batches, False)
            local.update(backend="none", run=r, sync=False, load=load,
                         throughput=per_step * args.steps / local["seconds"])
            runs.append(local)
            if rank == 0:
                print(f"# {name} {world} ranks run {r}: " + ", ".join(
                    f"{x['backend']} {x['throughput']:.0f} {unit}" for x in
                    (pair[order[0]], pair[order[1]], local)) + f"  (load {load:.1f})", flush=True)
        out.append({"model": name, "params": params, "nranks": world, "threads": threads,
                    "unit": unit, "per_step": per_step, "batch": batch, "runs": runs})
    if rank == 0 and args.result:
        with open(args.result, "w") as f:
            json.dump(out, f)
    dist.barrier(group=ctl)
    dist.destroy_process_group()
    return 0


# --------------------------------------------------------------------------
# The launcher and the summary
# --------------------------------------------------------------------------

def summarize(model: dict) -> dict:
    runs = model["runs"]
    by = {b: [r for r in runs if r["backend"] == b] for b in ("gohccl", "gloo", "none")}
    med = {b: statistics.median(r["throughput"] for r in rs) for b, rs in by.items()}
    step = {b: statistics.median(r["seconds"] for r in rs) for b, rs in by.items()}
    ratios = [g["throughput"] / o["throughput"] for g, o in zip(by["gohccl"], by["gloo"])]
    s = {"model": model["model"], "params": model["params"], "nranks": model["nranks"],
         "threads": model["threads"], "unit": model["unit"], "runs": len(by["gohccl"]),
         "gohccl": med["gohccl"], "gloo": med["gloo"], "compute_only": med["none"],
         "ratio": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
         "load": [r["load"] for r in runs if r["backend"] == "gohccl"]}
    for b in ("gohccl", "gloo"):
        s[f"exposed_{b}"] = max(0.0, 1.0 - step["none"] / step[b])
        s[f"in_flight_{b}"] = statistics.median(r["comm_in_flight_s"] / r["seconds"] for r in by[b])
    s["same_weights"] = [abs(g["weights_sum"] - o["weights_sum"]) <=
                         1e-4 * max(1.0, abs(o["weights_sum"]))
                         for g, o in zip(by["gohccl"], by["gloo"])]
    return s


def print_table(rows: list[dict]):
    print()
    print("| model | ranks x threads | gohccl | Gloo | gohccl / Gloo (min-max) | no comm | "
          "exposed comm gohccl / Gloo | in flight gohccl / Gloo | load |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in rows:
        name = ("GPT LM" if s["model"] == "gpt" else "CNN") + f" {s['params'] / 1e6:.1f}M"
        print(f"| {name} | {s['nranks']} x {s['threads']} | {s['gohccl']:.0f} {s['unit']} | "
              f"{s['gloo']:.0f} | {s['ratio']:.2f}x ({s['ratio_min']:.2f}-{s['ratio_max']:.2f}) | "
              f"{s['compute_only']:.0f} | {100 * s['exposed_gohccl']:.0f}% / "
              f"{100 * s['exposed_gloo']:.0f}% | {100 * s['in_flight_gohccl']:.0f}% / "
              f"{100 * s['in_flight_gloo']:.0f}% | "
              f"{min(s['load']):.1f}-{max(s['load']):.1f} |")


def launch(args, argv) -> int:
    cpus = usable_cpus()
    print(f"# benchmarks/train.py: models {','.join(args.models)}, ranks {args.nprocs}, "
          f"{args.runs} runs per backend of {args.warmup} warm-up + {args.steps} timed steps, "
          f"{cpus} usable CPUs, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}",
          flush=True)
    summary, detail = [], []
    for n in args.nprocs:
        with tempfile.TemporaryDirectory(prefix="gohccl-train-") as d:
            result = os.path.join(d, "result.json")
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   "--nproc-per-node", str(n), os.path.abspath(__file__), "--worker",
                   "--result", result] + argv
            env = dict(os.environ)
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")
            env["OMP_NUM_THREADS"] = str(max(1, cpus // n))
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
            try:
                rc = proc.wait(timeout=args.timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 15)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, 9)
                    proc.wait()
                print(f"train.py: the {n}-rank job took longer than {args.timeout:.0f}s",
                      file=sys.stderr)
                return 1
            if rc != 0:
                print(f"train.py: the {n}-rank job failed (exit {rc})", file=sys.stderr)
                return rc
            with open(result) as f:
                models = json.load(f)
        for m in models:
            detail.append(m)
            summary.append(summarize(m))
        print_table(summary)
    if any(not all(s["same_weights"]) for s in summary):
        print("# note: gohccl and Gloo runs ended with different weights (beyond rounding)",
              flush=True)
    print(f"# load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "runs": detail, "argv": argv}, f, indent=1)
    return 0


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    worker_mode = "--worker" in argv
    result = None
    if "--result" in argv:
        i = argv.index("--result")
        result = argv[i + 1]
        del argv[i:i + 2]
    args = parse_args(argv)
    args.result = result
    if worker_mode:
        return worker(args)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        print("train.py: run it without torchrun (it starts one torchrun job per rank "
              "count), or pass --worker", file=sys.stderr)
        return 2
    return launch(args, argv)


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)  # the Go runtime's threads need no interpreter teardown
