#!/usr/bin/env python3
"""all_reduce per algorithm: measured on this machine, simulated at scale,
and the simulator checked against the measurements.

    .venv/bin/python benchmarks/algorithms.py                  # everything below
    .venv/bin/python benchmarks/algorithms.py --only real      # measure and compare only
    .venv/bin/python benchmarks/algorithms.py --only scale,seed --out /tmp/alg
    .venv/bin/python benchmarks/algorithms.py --only real --pkg /tmp/snapshot   # a private build

Three parts, each printing markdown tables (and writing JSON to --out):

real   python -m gohccl.bench at 1 rank (the per-call overhead) and at 2, 3
       and 4 processes for every --algo (one gohccl group per GOHCCL_ALGO
       value), plus sendrecv at 2 ranks, all over TCP loopback
       (GOHCCL_TRANSPORT=tcp). From these it fits the link the simulator
       needs: a per-call overhead c and a per-step latency alpha from the ring's
       small-message times (t = c + 2(n-1) alpha), and the bandwidth B of a
       rank sending and receiving at once from sendrecv's large messages.
       It then runs gohccl-sim on one node of n ranks with those figures and
       prints, per algorithm and size, measured, predicted (c + simulated)
       and their ratio.
scale  gohccl-sim for nodes of 8 ranks, 8 to 1024 ranks, HCCS-like inside a
       node and 100 Gb/s RoCE-like between nodes, every candidate.
seed   the seed's case: 4 nodes x 8 ranks, 1 GiB (and 64 KiB), and 1 GiB
       inside one node of 8.

Speed is shown here, never asserted: docs/algorithms.md quotes a run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGOS = ("ring", "tree", "dtree", "rhd")
SEGMENT = 1 << 20  # a communicator's segment with the default GOHCCL_BUFFSIZE (8M / 4, at most 1 MiB)
REDUCE_GBS = 20.0  # float32 sum kernel beyond L2 on this machine (go test ./goimpl/reduce -bench Reduce)


def parse_size(s: str) -> int:
    s = s.strip().upper().rstrip("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(s[-1:], 1)
    return int(s[:-1] if mult > 1 else s) * mult


def human(n: int) -> str:
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m}{unit}"
    return str(n)


def fmt_us(s: float) -> str:
    us = s * 1e6
    return f"{us:.1f}" if us < 1000 else f"{us:.0f}"


def fmt_time(s: float) -> str:
    return f"{s * 1e6:.1f} us" if s < 1e-3 else f"{s * 1e3:.2f} ms"


# ------------------------------------------------------------------ sim

def build_sim(out: str) -> str:
    exe = os.path.join(out, "gohccl-sim")
    subprocess.run(["go", "build", "-o", exe, "./goimpl/sim/cmd/gohccl-sim"], check=True, cwd=REPO)
    return exe


def simulate(exe: str, *, nodes: int, per_node: int, nbytes: int, algos=None, coll="allreduce",
             intra=(392.0, 2.0), inter=(12.5, 10.0), reduce_gbs=200.0, segment=SEGMENT) -> list[dict]:
    """simulate runs gohccl-sim and returns its JSON rows (GB/s and us in)."""
    cmd = [exe, "-json", "-coll", coll, "-nodes", str(nodes), "-per-node", str(per_node),
           "-bytes", str(nbytes), "-segment", str(segment),
           "-intra-bw", repr(intra[0]), "-intra-lat", repr(intra[1]),
           "-inter-bw", repr(inter[0]), "-inter-lat", repr(inter[1]), "-reduce-bw", repr(reduce_gbs)]
    if algos:
        cmd += ["-algos", ",".join(algos)]
    res = subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO)
    return [json.loads(line) for line in res.stdout.splitlines() if line.strip()]


# ------------------------------------------------------------------ real

def bench(nproc: int, colls: str, args, path: str, algos=None) -> dict:
    env = dict(os.environ, GOHCCL_TRANSPORT="tcp")
    if args.pkg:
        env["PYTHONPATH"] = os.pathsep.join([args.pkg] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    cmd = [sys.executable, "-m", "gohccl.bench", "--nproc", str(nproc), "-c", colls,
           "--backends", "gohccl", "-b", args.minbytes, "-e", args.maxbytes, "-f", str(args.stepfactor),
           "-n", str(args.iters), "-w", str(args.warmup), "--json", path, "--no-progress"]
    if algos:
        cmd += ["--algo", ",".join(algos)]
    print("#", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, env=env, cwd=REPO, stdout=subprocess.DEVNULL)
    with open(path) as f:
        return json.load(f)


def times(run: dict, coll: str) -> dict:
    """times maps (algo, size) to seconds for coll in a bench JSON."""
    out = {}
    for r in run["results"]:
        if r["collective"] == coll and r.get("time_us") is not None:
            out[(r.get("algo") or "env", r["size"])] = r["time_us"] * 1e-6
    return out


def fit_line(xs, ys):
    """fit_line returns the least-squares intercept and slope of ys on xs."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return my - slope * mx, slope


def real(args, exe: str) -> dict:
    out = {"runs": {}}
    one = bench(1, "all_reduce", args, os.path.join(args.out, "real-1.json"))
    out["runs"][1] = one
    overhead1 = min(t for (_, s), t in times(one, "all_reduce").items() if s <= 64)
    runs = {}
    for n in args.nproc:
        colls = "all_reduce,sendrecv" if n == 2 else "all_reduce"
        runs[n] = bench(n, colls, args, os.path.join(args.out, f"real-{n}.json"), list(args.algos))
        out["runs"][n] = runs[n]
    loads = [(r["load_average_start"], r["load_average_end"]) for r in out["runs"].values()]

    # alpha and c from the ring's smallest messages: t = c + 2(n-1) alpha.
    small = min(s for (_, s) in times(runs[args.nproc[0]], "all_reduce"))
    xs = [2 * (n - 1) for n in args.nproc]
    ys = [times(runs[n], "all_reduce")[("ring", small)] for n in args.nproc]
    c, alpha = fit_line(xs, ys) if len(xs) > 1 else (overhead1, ys[0] - overhead1)
    alpha = max(alpha, 1e-6)
    # B from sendrecv at 2 ranks: the slope between its two largest sizes.
    sr = sorted((s, t) for (a, s), t in times(runs[2], "sendrecv").items() if a == args.algos[0]) if 2 in runs else []
    (s1, t1), (s2, t2) = sr[-2], sr[-1]
    bw = (s2 - s1) / max(t2 - t1, 1e-9)
    link = {"overhead_1rank_s": overhead1, "c_s": c, "alpha_s": alpha, "bw_Bps": bw,
            "sendrecv_small_s": sr[0][1], "load_averages": loads}
    out["link"] = link

    print(f"\n### Measured vs simulated, TCP loopback, {', '.join(map(str, args.nproc))} processes\n")
    print(f"Link fitted from these runs: per-call overhead c = {c * 1e6:.1f} us (1 rank, size-1 fast path: "
          f"{overhead1 * 1e6:.1f} us), per-step latency alpha = {alpha * 1e6:.1f} us, bandwidth B = "
          f"{bw / 1e9:.2f} GB/s per rank each way (sendrecv at 2 ranks, {human(s1)} to {human(s2)}); "
          f"reduce {REDUCE_GBS:g} GB/s; segment {human(SEGMENT)}. Load average (1 min) during the runs: "
          + ", ".join(f"{a[0]:.1f}-{b[0]:.1f}" for a, b in loads) + ".\n")
    print("| ranks | algorithm | size | measured (us) | predicted (us) | measured / predicted |")
    print("|---|---|---|---|---|---|")
    rows = []
    for n in args.nproc:
        t = times(runs[n], "all_reduce")
        for algo in args.algos:
            for size in sorted(s for (a, s) in t if a == algo):
                sim = simulate(exe, nodes=1, per_node=n, nbytes=size, algos=[algo],
                               intra=(bw / 1e9, alpha * 1e6), inter=(bw / 1e9, alpha * 1e6),
                               reduce_gbs=REDUCE_GBS)[0]
                pred = c + sim["sim_s"]
                meas = t[(algo, size)]
                rows.append({"ranks": n, "algo": algo, "size": size, "measured_s": meas,
                             "sim_s": sim["sim_s"], "predicted_s": pred})
                print(f"| {n} | {algo} | {human(size)} | {fmt_us(meas)} | {fmt_us(pred)} | {meas / pred:.2f} |")
    out["compare"] = rows
    return out


# ------------------------------------------------------------------ scale and seed

def table(title: str, rows: list[dict]):
    print(f"\n{title}\n")
    print("| algorithm | model | simulated | busbw (GB/s) |")
    print("|---|---|---|---|")
    for r in rows:
        if "tuner" in r:
            print(f"\ntuner's choice: `{r['tuner']}`")
        elif "error" in r:
            print(f"| `{r['algorithm']}` | cannot run: {r['error']} | | |")
        else:
            print(f"| `{r['algorithm']}` | {fmt_time(r['model_s'])} | {fmt_time(r['sim_s'])} | {r['busbw']:.2f} |")


def scale(args, exe: str) -> dict:
    out = {}
    print("\n### Simulated all_reduce, nodes of 8 ranks (HCCS-like 392 GB/s 2 us inside, "
          "RoCE-like 12.5 GB/s 10 us between, reduce 200 GB/s)\n")
    sizes = [parse_size(s) for s in args.scale_sizes]
    for size in sizes:
        seg = 4 << 20 if size >= 64 << 20 else SEGMENT
        per = {}
        for nodes in args.scale_nodes:
            rows = simulate(exe, nodes=nodes, per_node=8, nbytes=size, segment=seg)
            per[nodes] = rows
        out[size] = per
        names = [r["algorithm"] for r in per[args.scale_nodes[-1]] if "algorithm" in r]
        print(f"\nall_reduce of {human(size)}, segment {human(seg)}: simulated time, tuner's choice last\n")
        print("| ranks | " + " | ".join(f"`{a}`" for a in names) + " | tuner |")
        print("|---|" + "---|" * (len(names) + 1))
        for nodes, rows in per.items():
            by = {r["algorithm"]: r for r in rows if "algorithm" in r}
            cells = [fmt_time(by[a]["sim_s"]) if a in by and "sim_s" in by[a] else "" for a in names]
            tuner = next(r["tuner"] for r in rows if "tuner" in r)
            print(f"| {8 * nodes} | " + " | ".join(cells) + f" | `{tuner}` |")
    return out


def seed(args, exe: str) -> dict:
    out = {}
    for title, kw in (
        ("The seed's case: all_reduce of 1G on 4 nodes x 8 ranks, segment 16M",
         dict(nodes=4, per_node=8, nbytes=1 << 30, segment=16 << 20)),
        ("The same 1G inside one node of 8", dict(nodes=1, per_node=8, nbytes=1 << 30, segment=16 << 20)),
        ("all_reduce of 64K on 4 nodes x 8 ranks, segment 1M", dict(nodes=4, per_node=8, nbytes=64 << 10)),
    ):
        rows = simulate(exe, **kw)
        out[title] = rows
        table(f"### {title}", rows)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="real,scale,seed", help="comma list of real, scale, seed")
    p.add_argument("--nproc", default="2,3,4", help="process counts to measure")
    p.add_argument("--algos", default=",".join(ALGOS), help="GOHCCL_ALGO values to measure")
    p.add_argument("-b", "--minbytes", default="8")
    p.add_argument("-e", "--maxbytes", default="16M")
    p.add_argument("-f", "--stepfactor", default=8, type=int)
    p.add_argument("-n", "--iters", default=30, type=int)
    p.add_argument("-w", "--warmup", default=5, type=int)
    p.add_argument("--scale-nodes", default="1,2,4,8,16,32,64,128")
    p.add_argument("--scale-sizes", default="64K,64M")
    p.add_argument("--out", default=None, help="directory for the JSON files (default: a new temporary one)")
    p.add_argument("--pkg", default=None,
                   help="directory holding a gohccl package to measure instead of the installed one, put first "
                        "on PYTHONPATH: a snapshot (gohccl/ with _C*.so and lib/libgohccl.so) is immune to a "
                        "rebuild of the working tree under the running ranks, which kills them with SIGBUS")
    args = p.parse_args()
    args.nproc = [int(x) for x in args.nproc.split(",")]
    args.algos = [a for a in args.algos.split(",") if a]
    args.scale_nodes = [int(x) for x in args.scale_nodes.split(",")]
    args.scale_sizes = args.scale_sizes.split(",")
    args.out = args.out or tempfile.mkdtemp(prefix="gohccl-algorithms-")
    os.makedirs(args.out, exist_ok=True)
    parts = args.only.split(",")
    exe = build_sim(args.out)
    result = {}
    if "real" in parts:
        result["real"] = real(args, exe)
    if "scale" in parts:
        result["scale"] = scale(args, exe)
    if "seed" in parts:
        result["seed"] = seed(args, exe)
    path = os.path.join(args.out, "algorithms.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1, default=str)
    print(f"\n# JSON: {path}")


if __name__ == "__main__":
    main()
