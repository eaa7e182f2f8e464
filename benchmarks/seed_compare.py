"""seed_compare: the measured all_reduce of benchmarks/seed.sh beside gohccl-sim.

Reads DIR/bench.json (python -m gohccl.bench --json) and DIR/bench.log (every
rank's GOHCCL_DEBUG=INFO), takes the inter-node link each communicator measured
at init (rank 0's "inter-node link:" line) and this host's hand-off, runs
gohccl-sim on the same cluster with those figures for every forced choice and
for what the automatic one chose, and prints one markdown table per size:
measured, simulated, their ratio, the model's price; then whether the automatic
choice came within 10% of the fastest forced one and the simulator within 30%
of each measured time. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys

TOPOLOGY = re.compile(r"\[gohccl 0/(\d+)\] INFO topology .*GOHCCL_ALGO=(\S*),")
INTER = re.compile(r"\[gohccl 0/(\d+)\] INFO inter-node link: latency ([0-9.]+)us, "
                   r"bandwidth ([0-9.]+) GB/s per rank(?:, ([0-9.]+) GB/s per node, shared by its ranks"
                   r"|, a link of its own per rank)? \((.*)\)")
HANDOFF = re.compile(r"\[gohccl \d+/\d+\] INFO .*host figures: hand-off ([0-9.]+)us")
CHOICE = re.compile(r"\[gohccl 0/(\d+)\] INFO allreduce \[(\S+), (\S+)\) on \d+ ranks.* -> (\S+)$")

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_size(s: str) -> int:
    m = re.fullmatch(r"([0-9.]+)(B|KiB|MiB|GiB)", s)
    if not m:
        raise ValueError(f"size {s!r}")
    return int(float(m.group(1)) * UNITS[m.group(2)])


def human(n: int) -> str:
    for unit, v in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= v and n % v == 0:
            return f"{n // v} {unit}"
    return f"{n} B"


def read_log(path: str, world: int):
    """read_log returns {algo: (latency_s, bandwidth_Bps, source)} from rank 0's
    inter-node lines (each follows its communicator's topology line), the
    hand-offs seen, and the automatic choice per size class
    [(lo, hi, choice)] (rank 0's priced lines with no GOHCCL_ALGO note)."""
    links, handoffs, auto = {}, [], []
    algo = None
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if m := TOPOLOGY.search(line):
                algo = m.group(2) if int(m.group(1)) == world else None
            elif (m := INTER.search(line)) and int(m.group(1)) == world:
                node = float(m.group(4)) * 1e9 if m.group(4) else 0.0
                links.setdefault(algo or "?", (float(m.group(2)) * 1e-6, float(m.group(3)) * 1e9, node, m.group(5)))
            if m := HANDOFF.search(line):
                handoffs.append(float(m.group(1)) * 1e-6)
            if (m := CHOICE.search(line)) and int(m.group(1)) == world and "GOHCCL_ALGO" not in line:
                auto.append((parse_size(m.group(2)), parse_size(m.group(3)), m.group(4)))
    return links, handoffs, auto


def simulate(sim: str, hosts: int, ranks: int, size: int, algo: str, link, intra_lat: float):
    """simulate runs gohccl-sim for one choice with the tuner's figures: the
    measured inter-node link per rank and each host's shared link (the
    pairs' sum where they share one; else none), the intra-node defaults
    (GOHCCL_INTRA_*: 3 GB/s, 5 us or the hand-off), reduce 20 GB/s, segment
    1 MiB (GOHCCL_BUFFSIZE 8M / 4, at most 1 MiB)."""
    lat, bw, node, _ = link
    argv = [sim, "-nodes", str(hosts), "-per-node", str(ranks), "-bytes", str(size),
            "-intra-bw", "3", "-intra-lat", f"{intra_lat * 1e6:g}",
            "-inter-bw", f"{bw / 1e9:g}", "-inter-lat", f"{lat * 1e6:g}", "-node-bw", f"{node / 1e9:g}",
            "-reduce-bw", "20", "-segment", "1M", "-algos", algo, "-json"]
    p = subprocess.run(argv, capture_output=True, text=True)
    if p.returncode != 0:
        return None, None, p.stderr.strip()
    for line in p.stdout.splitlines():
        v = json.loads(line)
        if "sim_s" in v:
            return v["sim_s"], v["model_s"], v["algorithm"]
        if "error" in v:
            return None, None, v["error"]
    return None, None, "no result"


def fit_latency(a, results, links, everyone, intra_lat):
    """fit_latency asks what per-step latency, across nodes and inside one
    alike (a step's cost under load is mostly the wait for a core), in place
    of the probe's and the hand-off, makes the simulator fit each size's
    forced rows best (least squares of the relative error; simulated time
    is linear in it), and
    prints the ratios the simulator then gets: how much of the gap is the
    cost of a step under this machine's load rather than the bandwidth."""
    print()
    print("Fitted step latency, the same across and inside nodes (what a step costs here under "
          "load, against the probe's, which ran while the other ranks waited):")
    print()
    for size in sorted({r["size"] for r in results}):
        pts = []
        for r in results:
            if r["size"] != size or r["backend"] != "gohccl" or r["algo"] in (None, "auto") or not r["time_us"]:
                continue
            lat, bw, node, src = links.get(r["algo"], everyone)
            t1 = simulate(a.sim, a.hosts, a.ranks, size, r["algo"], (1e-6, bw, node, src), 1e-6)[0]
            t2 = simulate(a.sim, a.hosts, a.ranks, size, r["algo"], (1001e-6, bw, node, src), 1001e-6)[0]
            if t1 is None or t2 is None:
                continue
            k = (t2 - t1) / 1e-3
            pts.append((r["algo"], t1 - k * 1e-6, k, r["time_us"] * 1e-6))
        if not pts:
            continue
        num = sum(k * (m - t0) / m ** 2 for _, t0, k, m in pts)
        den = sum(k * k / m ** 2 for _, t0, k, m in pts)
        lat = max(num / den, 0.0) if den else 0.0
        ratios = ", ".join(f"{al} {(t0 + k * lat) / m:.2f}" for al, t0, k, m in pts)
        print(f"- {human(size)}: {lat * 1e6:.0f} us per step; simulated / measured then: {ratios}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True, help="directory with bench.json and bench.log")
    ap.add_argument("--sim", required=True, help="the gohccl-sim binary")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--rate", default="")
    a = ap.parse_args()
    world = a.hosts * a.ranks
    with open(f"{a.out}/bench.json") as f:
        results = [r for r in json.load(f)["results"] if r["collective"] == "all_reduce"]
    links, handoffs, auto = read_log(f"{a.out}/bench.log", world)
    if not links:
        print("seed_compare: no 'inter-node link' line from rank 0 in bench.log", file=sys.stderr)
        return 1
    everyone = tuple(statistics.median(v[k] for v in links.values()) for k in range(3)) + ("median",)
    intra_lat = max(5e-6, statistics.median(handoffs)) if handoffs else 5e-6
    print()
    print(f"Inter-node link as each communicator measured it at init (rank 0 and rank {a.ranks}), "
          f"rate set {a.rate or '?'} per host link:")
    print()
    print("| GOHCCL_ALGO | latency | bandwidth per rank | per host, shared | probe |")
    print("|---|---|---|---|---|")
    for algo, (lat, bw, node, src) in links.items():
        print(f"| `{algo}` | {lat * 1e6:.1f} us | {bw / 1e6:.1f} MB/s | "
              f"{f'{node / 1e6:.1f} MB/s' if node else 'no'} | {src} |")
    sims = []
    verdicts = []
    for size in sorted({r["size"] for r in results}):
        rows = [r for r in results if r["size"] == size and r["time_us"]]
        print()
        print(f"### all_reduce {human(size)}, {a.hosts} hosts x {a.ranks} ranks")
        print()
        print("| label | measured | simulated | sim / measured | model | schedule simulated |")
        print("|---|---|---|---|---|---|")
        forced = {}
        auto_time = None
        for r in rows:
            t = r["time_us"] * 1e-6
            algo = r["algo"]
            if r["backend"] != "gohccl" or algo is None:
                print(f"| {r['label']} | {t * 1e3:.3f} ms | | | | |")
                continue
            name = algo
            note = ""
            if algo == "auto":
                auto_time = t
                chosen = [c for lo, hi, c in auto if lo <= size < hi]
                if not chosen:
                    print(f"| {r['label']} | {t * 1e3:.3f} ms | | | | (no INFO line for this size) |")
                    continue
                name = chosen[-1].split("/")[0]
                if "level0:mesh" in name:
                    # The simulator has no shared-memory engine: its closest
                    # form over links is level0 ring on the intra-node links.
                    note = f" (chose {chosen[-1]}; level0 on the links)"
                    name = name.replace("level0:mesh", "level0:ring")
                else:
                    note = f" (chose {chosen[-1]})"
            else:
                forced[algo] = t
            link = links.get(algo, everyone)
            s, model, what = simulate(a.sim, a.hosts, a.ranks, size, name, link, intra_lat)
            if s is None:
                print(f"| {r['label']} | {t * 1e3:.3f} ms | n/a | | | {what} |")
                continue
            ratio = s / t
            sims.append((size, algo, ratio))
            print(f"| {r['label']} | {t * 1e3:.3f} ms | {s * 1e3:.3f} ms | {ratio:.2f} | {model * 1e3:.3f} ms | {what}{note} |")
        if forced and auto_time is not None:
            best = min(forced, key=forced.get)
            v = auto_time / forced[best]
            verdicts.append((size, v, best))
    print()
    print("Automatic choice against the fastest forced one (goal: within 10%):")
    print()
    for size, v, best in verdicts:
        print(f"- {human(size)}: auto / {best} = {v:.2f} {'ok' if v <= 1.10 else 'MISSED'}")
    fit_latency(a, results, links, everyone, intra_lat)
    within = [x for x in sims if 0.7 <= x[2] <= 1.3]
    print()
    print(f"Simulator within 30% of the measured time: {len(within)} of {len(sims)}"
          + (": missed " + ", ".join(f"{human(s)} {al} ({r:.2f})" for s, al, r in sims if not 0.7 <= r <= 1.3)
             if len(within) < len(sims) else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
