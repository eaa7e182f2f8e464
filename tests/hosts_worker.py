"""The rank side of the emulated-hosts suite (tests/test_hosts.py).

torchrun starts this script on every emulated host (tests/netns.py); each
rank joins the default gohccl group through torchrun's environment and runs
the phases its spec names, writing one result file per phase and rank
(`<outdir>/<phase>-<rank>.pkl`) so the parent can act between phases:

  sweep      every primitive and dtype family (cases() below), subgroups
             within and across hosts and from new_subgroups, every forced
             algorithm on a group of all ranks, and DDP on gohccl beside DDP
             on a Gloo group; results travel back packed (harness.Packed),
             and the parent checks them against numpy references
  misconfig  a new group created with GOHCCL_SOCKET_IFNAME=lo: every rank
             publishes a loopback address no other host can reach; records
             when the group creation failed and its message
  fault      a stream of collectives on a group with a short timeout; after
             a few rounds each rank touches `stream-<rank>`, the parent
             breaks a host (link down, ranks killed), and each rank records
             when its stream failed and the message

Inputs come from harness.gen_values(seed, rank, ...) so the parent
regenerates every rank's input. The case table is plain data, importable
without torch, and the parent reads the same table.
"""

from __future__ import annotations

import datetime
import json
import os
import pickle
import sys
import time
import traceback
from typing import NamedTuple

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
if TESTS_DIR not in sys.path:
    sys.path.insert(0, TESTS_DIR)

import harness  # noqa: E402

# SWEEP_DTYPES covers each dtype family: the two wide floats, the two half
# floats, and an integer type.
SWEEP_DTYPES = ["float32", "float64", "float16", "bfloat16", "int32"]
# SIZES are elements per rank: zero-size, one, and an odd count that divides
# into no power of two.
SIZES = [0, 1, 1237]
# BIG is a float32 count past GOHCCL_BUFFSIZE's default (8 MiB), so the
# message streams through the scratch in chunks across the hosts.
BIG = 2_500_001
PRIMITIVES = [
    "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter",
    "reduce_scatter_tensor", "broadcast", "reduce", "gather", "scatter",
    "all_to_all", "all_to_all_single", "send_recv", "barrier",
]
# ALGOS are the GOHCCL_ALGO values each run on a group of all ranks.
ALGOS = ["ring", "tree", "dtree", "rhd", "binomial", "level0:ring;level1:ring",
         "level1:tree", "level0:rhd;level1:rhd"]
ALGO_CASES = [("all_reduce", "float32", 1237), ("all_reduce", "float32", 300_001),
              ("all_gather_into_tensor", "float32", 1237),
              ("reduce_scatter_tensor", "float32", 1237), ("broadcast", "float32", 300_001),
              ("reduce", "bfloat16", 1237)]
SUBGROUP_CASES = [("all_reduce", "float32", 1237), ("all_gather_into_tensor", "int32", 5),
                  ("broadcast", "float64", 33)]
DDP_STEPS = 6
SEED = 20240617


class Case(NamedTuple):
    """Case is one collective call: what, on which dtype and size, with
    which op and root; key seeds its inputs."""
    key: int
    prim: str
    dtype: str
    n: int
    op: str = "SUM"
    root: int = 0

    @property
    def name(self) -> str:
        return f"{self.prim}/{self.dtype}/{self.n}/{self.op}/root{self.root}"


def cases(world: int) -> list[Case]:
    """cases lists the sweep's primitive cases for a world of `world` ranks;
    roots move over the ranks (so over the hosts) with the dtype."""
    out: list[Case] = []

    def add(prim, dtype, n, op="SUM", root=0):
        out.append(Case(len(out) + 1, prim, dtype, n, op, root))

    for prim in PRIMITIVES:
        if prim == "barrier":
            add(prim, "int32", 0)
            continue
        for d, dtype in enumerate(SWEEP_DTYPES):
            for n in SIZES:
                add(prim, dtype, n, "SUM", (d + n) % world)
    # Large: the gathered and scattered forms move BIG elements in all.
    for prim, n in (("all_reduce", BIG), ("all_gather_into_tensor", BIG // world),
                    ("reduce_scatter_tensor", BIG // world), ("broadcast", BIG)):
        add(prim, "float32", n, "SUM", world - 1)
    add("all_reduce", "float32", 1237, "MAX")
    add("all_reduce", "float32", 1237, "AVG")
    add("all_reduce", "float64", 1237, "PRODUCT")
    add("all_reduce", "int32", 1237, "MIN")
    add("reduce", "float16", 1237, "MAX", world - 1)
    return out


def kind_of(case: Case) -> str:
    """kind_of picks gen_values' value range: products stay near 1."""
    return "product" if case.op == "PRODUCT" else "any"


def split(src: int, dst: int, n: int) -> int:
    """split is how many elements rank src sends rank dst in the uneven
    all_to_all_single of a case of size n (zero for some pairs)."""
    return 0 if n == 0 else (n + 7 * src + 3 * dst) % 11


def input_shape(case: Case, me: int, size: int) -> tuple:
    """input_shape is the input of the member `me` of a group of `size` in a
    case: (n,) for most primitives, one row per member for the list and
    scatter forms."""
    if case.prim in ("reduce_scatter", "reduce_scatter_tensor", "scatter", "all_to_all"):
        return (size, case.n)
    if case.prim == "all_to_all_single":
        return (sum(split(me, j, case.n) for j in range(size)),)
    return (case.n,)


def case_input(case: Case, rank: int, me: int, size: int, seed: int = SEED):
    """case_input is global rank `rank`'s numpy input of a case, as member
    `me` of a group of `size` (the parent calls it too)."""
    return harness.gen_values(seed, rank, case.dtype, input_shape(case, me, size),
                              kind_of(case), case.key)


def subgroups(world: int, local: int) -> dict[str, list[int]]:
    """subgroups names the groups of the sweep's subgroup phase: each host's
    ranks, the first rank of every host, and all ranks but 0 (they span
    hosts in every topology tried here)."""
    hosts = world // local
    groups = {}
    if local > 1:
        for h in range(hosts):
            groups[f"host{h}"] = list(range(h * local, (h + 1) * local))
    groups["first_of_each_host"] = [h * local for h in range(hosts)]
    if world >= 3:
        groups["all_but_0"] = list(range(1, world))
    return groups


def new_subgroups_layout(world: int) -> list[list[int]]:
    """new_subgroups_layout is what dist.new_subgroups(2) makes for an even
    world; for an odd one the sweep enumerates these groups itself."""
    if world % 2 == 0:
        return [[r, r + 1] for r in range(0, world, 2)]
    return [[0, world - 1], list(range(1, world - 1))]


def subgroup_case(group_index: int, i: int, size: int) -> Case:
    """subgroup_case is the i-th SUBGROUP_CASES case on the sweep's
    group_index-th subgroup (of size members), rooted at its last member."""
    prim, dtype, n = SUBGROUP_CASES[i]
    return Case(1000 + 10 * group_index + i, prim, dtype, n, "SUM", size - 1)


def algo_case(algo_index: int, i: int, world: int) -> Case:
    """algo_case is the i-th ALGO_CASES case on the group of ALGOS[algo_index]."""
    prim, dtype, n = ALGO_CASES[i]
    return Case(2000 + 10 * algo_index + i, prim, dtype, n, "SUM", (world - 1 - i) % world)


# --------------------------------------------------------------------------
# Running cases (rank side)
# --------------------------------------------------------------------------

def run_case(case: Case, rank: int, world: int, group=None, ranks: list[int] | None = None):
    """run_case issues one case on group (ranks: its members, global) and
    returns what the parent needs: packed outputs, by name."""
    import torch
    import torch.distributed as dist

    ranks = ranks or list(range(world))
    size = len(ranks)
    me = ranks.index(rank)
    x = harness.make_tensor(case_input(case, rank, me, size), case.dtype)
    dtype = x.dtype
    small = case.n <= 20_000

    def packed(t, same_on_all=False):
        # A large result every rank holds alike travels whole from the
        # first member only; the others send its digest.
        return harness.pack(t, keep=small or not same_on_all or me == 0)

    def empty(*shape):
        return harness.fill_garbage(torch.empty(*shape, dtype=dtype))

    p, n, root = case.prim, case.n, ranks[case.root % size]
    op = harness.reduce_op(case.op)
    if p == "all_reduce":
        dist.all_reduce(x, op=op, group=group)
        return {"out": packed(x, same_on_all=True)}
    if p == "all_gather":
        outs = [empty(n) for _ in range(size)]
        dist.all_gather(outs, x, group=group)
        return {"out": [packed(t) for t in outs]}
    if p == "all_gather_into_tensor":
        out = empty(size * n)
        dist.all_gather_into_tensor(out, x, group=group)
        return {"out": packed(out, same_on_all=True)}
    if p == "reduce_scatter":
        out = empty(n)
        dist.reduce_scatter(out, list(x.unbind(0)), op=op, group=group)
        return {"out": packed(out)}
    if p == "reduce_scatter_tensor":
        out = empty(n)
        dist.reduce_scatter_tensor(out, x.reshape(-1), op=op, group=group)
        return {"out": packed(out)}
    if p == "broadcast":
        dist.broadcast(x, src=root, group=group)
        return {"out": packed(x, same_on_all=True)}
    if p == "reduce":
        dist.reduce(x, dst=root, op=op, group=group)
        return {"out": packed(x) if rank == root else None}
    if p == "gather":
        outs = [empty(n) for _ in range(size)] if rank == root else None
        dist.gather(x, gather_list=outs, dst=root, group=group)
        return {"out": [packed(t) for t in outs] if outs else None}
    if p == "scatter":
        out = empty(n)
        dist.scatter(out, scatter_list=list(x.unbind(0)) if rank == root else None, src=root, group=group)
        return {"out": packed(out)}
    if p == "all_to_all":
        outs = [empty(n) for _ in range(size)]
        dist.all_to_all(outs, [r.contiguous() for r in x.unbind(0)], group=group)
        return {"out": [packed(t) for t in outs]}
    if p == "all_to_all_single":
        out_splits = [split(j, me, n) for j in range(size)]
        in_splits = [split(me, j, n) for j in range(size)]
        out = empty(sum(out_splits))
        dist.all_to_all_single(out, x, output_split_sizes=out_splits,
                               input_split_sizes=in_splits, group=group)
        return {"out": packed(out)}
    if p == "send_recv":
        # A ring: every rank sends to the next and receives from the
        # previous, so every pair of neighbouring hosts is crossed.
        out = empty(n)
        reqs = [dist.isend(x, dst=ranks[(me + 1) % size], group=group),
                dist.irecv(out, src=ranks[(me - 1) % size], group=group)]
        for r in reqs:
            r.wait()
        return {"out": packed(out)}
    raise ValueError(p)


def run_barrier(outdir: str, rank: int, world: int, key: int):
    """run_barrier: each rank leaves a marker file, enters the barrier, and
    reports which ranks' markers it saw after it; a barrier that lets a
    rank through early shows up as a missing marker."""
    import torch.distributed as dist
    seen = []
    for round_ in range(3):
        # Ranks that arrive later sleep first, so an early exit is likely seen.
        time.sleep(0.05 * ((rank + round_) % world))
        open(os.path.join(outdir, f"barrier-{key}-{round_}-{rank}"), "w").close()
        dist.barrier()
        seen.append(sorted(r for r in range(world)
                           if os.path.exists(os.path.join(outdir, f"barrier-{key}-{round_}-{r}"))))
    return {"seen": seen}


def sweep(spec: dict, rank: int, world: int, local: int) -> dict:
    """sweep runs every case; an exception is recorded per case."""
    import torch.distributed as dist
    results: dict = {}
    times = results["times"] = {"sweep": time.time()}
    for case in cases(world):
        if case.prim == "barrier":
            results[case.name] = harness.attempt(run_barrier, spec["outdir"], rank, world, case.key)
        else:
            results[case.name] = harness.attempt(run_case, case, rank, world)

    times["subgroups"] = time.time()
    # Subgroups: every rank creates every group, in the same order.
    groups = {}
    for name, members in subgroups(world, local).items():
        groups[name] = (dist.new_group(members), members)
    layout = new_subgroups_layout(world)
    if world % 2 == 0:
        mine, _ = dist.new_subgroups(group_size=2)
    else:
        mine, _ = dist.new_subgroups_by_enumeration(layout)
    members = next(g for g in layout if rank in g)
    groups["new_subgroups"] = (mine, members)
    for k, (name, (g, members)) in enumerate(groups.items()):
        if rank not in members:
            continue
        for i, (prim, dtype, n) in enumerate(SUBGROUP_CASES):
            case = subgroup_case(k, i, len(members))
            results[f"group:{name}:{case.name}"] = {
                "members": members, "case": case, "index": k,
                "result": harness.attempt(run_case, case, rank, world, g, members)}

    # Every forced algorithm on a group of all ranks (GOHCCL_ALGO is read
    # when a communicator is created).
    times["algos"] = time.time()
    for a, algo in enumerate(ALGOS):
        os.environ["GOHCCL_ALGO"] = algo
        try:
            g = dist.new_group(list(range(world)))
        finally:
            del os.environ["GOHCCL_ALGO"]
        for i in range(len(ALGO_CASES)):
            case = algo_case(a, i, world)
            results[f"algo:{algo}:{case.name}"] = {
                "case": case, "result": harness.attempt(run_case, case, rank, world, g, list(range(world)))}

    times["ddp"] = time.time()
    results["ddp"] = harness.attempt(ddp_parity, rank, world)
    times["end"] = time.time()
    return results


def ddp_parity(rank: int, world: int) -> dict:
    """ddp_parity trains one model under DDP on gohccl (the default group)
    and a copy under DDP on a Gloo group, same seed and data, and returns
    both sets of parameters. Ranks start from different weights: DDP's
    broadcast from rank 0 at construction must make them equal."""
    import copy
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(1234)
    base = torch.nn.Sequential(torch.nn.Linear(16, 33), torch.nn.Tanh(), torch.nn.Linear(33, 5))
    with torch.no_grad():
        for p in base.parameters():
            p.add_(0.01 * rank)
    gloo = dist.new_group(backend="gloo")
    out = {}
    for name, pg in (("gohccl", None), ("gloo", gloo)):
        model = DDP(copy.deepcopy(base), process_group=pg, bucket_cap_mb=0.001)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        for step in range(DDP_STEPS):
            x = harness.gen_tensor(SEED, rank, "float32", (8, 16), key=5000 + step)
            y = harness.gen_tensor(SEED, rank, "float32", (8, 5), key=6000 + step)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        out[name] = [harness.pack(p.detach()) for p in model.module.parameters()]
    return out


# --------------------------------------------------------------------------
# Misconfiguration and faults
# --------------------------------------------------------------------------

def misconfig(spec: dict, rank: int, world: int) -> dict:
    """misconfig creates a group of all ranks with GOHCCL_SOCKET_IFNAME=lo
    and a short timeout, and records how and when that failed."""
    import torch
    import torch.distributed as dist
    os.environ["GOHCCL_SOCKET_IFNAME"] = "lo"
    start = time.time()
    try:
        g = dist.new_group(list(range(world)),
                           timeout=datetime.timedelta(seconds=spec["fault_pg_timeout"]))
        t = torch.ones(8)
        dist.all_reduce(t, group=g)
        return {"start": start, "failed": None, "error": None, "value": t[0].item()}
    except Exception as exc:  # noqa: BLE001 - the failure is the result
        return {"start": start, "failed": time.time(), "error": f"{type(exc).__name__}: {exc}"}
    finally:
        del os.environ["GOHCCL_SOCKET_IFNAME"]


def fault_stream(spec: dict, rank: int, world: int) -> dict:
    """fault_stream runs collectives of mixed sizes on a group with a short
    timeout until one fails or the stream's deadline passes."""
    import torch
    import torch.distributed as dist
    g = dist.new_group(list(range(world)),
                       timeout=datetime.timedelta(seconds=spec["fault_pg_timeout"]))
    big = torch.ones(256 << 10)
    small = torch.ones(1024)
    gathered = torch.empty(world * 1024)
    rounds = 0
    deadline = time.time() + spec["stream_s"]
    marker = os.path.join(spec["outdir"], f"stream-{rank}")
    try:
        while time.time() < deadline:
            dist.all_reduce(big, group=g)
            dist.all_gather_into_tensor(gathered, small, group=g)
            dist.broadcast(small, src=rounds % world, group=g)
            rounds += 1
            if rounds == 5:
                open(marker, "w").close()
        return {"failed": None, "error": None, "rounds": rounds}
    except Exception as exc:  # noqa: BLE001 - the failure is the result
        return {"failed": time.time(), "error": f"{type(exc).__name__}: {exc}", "rounds": rounds}


def _write(outdir: str, phase: str, rank: int, value):
    path = os.path.join(outdir, f"{phase}-{rank}.pkl")
    with open(path + ".tmp", "wb") as f:
        pickle.dump(value, f)
    os.replace(path + ".tmp", path)


def main(spec_path: str):
    with open(spec_path) as f:
        spec = json.load(f)
    import torch
    import torch.distributed as dist
    import gohccl  # noqa: F401 - registers the backend
    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_WORLD_SIZE"])
    outdir = spec["outdir"]
    started = time.time()
    try:
        dist.init_process_group("gohccl", timeout=datetime.timedelta(seconds=spec["pg_timeout"]))
        joined = time.time()
        for phase in spec["phases"]:
            if phase == "sweep":
                value = sweep(spec, rank, world, local)
            elif phase == "misconfig":
                value = misconfig(spec, rank, world)
            elif phase == "fault":
                value = fault_stream(spec, rank, world)
            else:
                raise ValueError(f"unknown phase {phase!r}")
            value = {"ok": True, "value": value, "host": os.uname().nodename,
                     "started": started, "joined": joined, "done": time.time()}
            _write(outdir, phase, rank, value)
            if phase == "fault":
                # The group is broken by design: leave without teardown.
                sys.stdout.flush()
                sys.stderr.flush()
                os._exit(0)
        dist.barrier()
        dist.destroy_process_group()
        # The parent stops waiting here (the launchers' own shutdown
        # takes seconds more and proves nothing).
        open(os.path.join(outdir, f"closed-{rank}"), "w").close()
    except BaseException:  # noqa: BLE001 - reported to the parent
        _write(outdir, "crash", rank, {"ok": False, "traceback": traceback.format_exc()})
        sys.stderr.write(traceback.format_exc())
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    import hosts_worker  # the importable copy, so pickled cases name their module
    hosts_worker.main(sys.argv[1])
