#!/usr/bin/env python3
"""The automatic choice against every row forced, one job per label.

    .venv/bin/python benchmarks/autocheck.py                   # 4 ranks, 3 rounds
    .venv/bin/python benchmarks/autocheck.py --nproc 2 --reps 5 --json /tmp/auto.json

Issue 16 asks that the automatic choice be never more than 10% slower than
the best forced row. gohccl.bench --algo a,b,c interleaves one group per
label in one job, which is the right way to compare backends but not rows
on a crowded host: at 4 ranks on 2 cores a label's block follows another
label's, whose ranks finish at different times and leave their waiters
asleep, and the same row then ran 2.4x apart in two groups of one job
(docs/algorithms.md). A user runs one communicator. So here every label
(GOHCCL_ALGO value) is its own job (python -m gohccl.bench --algo LABEL),
the jobs run round after round with the order rotated, and each (collective,
size) compares the median over rounds of auto with the smallest median of
the rows that can run that collective (a forced row that cannot run falls
back to the automatic choice, and is left out).

Speed is shown, never asserted: docs/algorithms.md quotes a run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The rows of each collective (goimpl/tune/rows.go), by the ranks they need:
# single copy runs on two ranks only.
ROWS = {
    "all_reduce": ["mesh.oneshot", "mesh.twophase", "mesh.singlecopy", "ring", "tree", "dtree", "rhd"],
    "all_gather": ["mesh.oneshot", "mesh.singlecopy", "ring", "rhd", "bruck"],
    "reduce_scatter": ["mesh.oneshot", "ring", "rhd"],
    "broadcast": ["mesh.oneshot", "mesh.singlecopy", "ring", "binomial", "tree", "dtree"],
}


def rows_for(coll: str, nproc: int) -> list[str]:
    return [r for r in ROWS[coll] if nproc == 2 or r != "mesh.singlecopy"]


def run_job(args, label: str) -> dict:
    """One gohccl.bench job of one label: {(collective, size): us}. A label
    auto/T runs the automatic choice with GOHCCL_TUNE=T."""
    env = dict(os.environ)
    if label.startswith("auto/"):
        label, env["GOHCCL_TUNE"] = "auto", label.split("/", 1)[1]
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "run.json")
        cmd = [sys.executable, "-m", "gohccl.bench", "--nproc", str(args.nproc),
               "-c", ",".join(args.collectives), "-b", args.minbytes, "-e", args.maxbytes,
               "-f", "16", "-n", str(args.iters), "-w", str(args.warmup), "--block", "5",
               "--backends", "gohccl", "--algo", label, "--json", out, "--no-progress"]
        done = subprocess.run(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, timeout=args.timeout)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
        with open(out) as f:
            doc = json.load(f)
    return {(r["collective"], r["size"]): r["time_us"] for r in doc["results"] if r["time_us"]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--reps", type=int, default=3, help="rounds of one job per label (default 3)")
    p.add_argument("-c", "--collectives", default="all_reduce,all_gather,reduce_scatter,broadcast")
    p.add_argument("-b", "--minbytes", default="4K")
    p.add_argument("-e", "--maxbytes", default="16M")
    p.add_argument("-n", "--iters", type=int, default=10)
    p.add_argument("-w", "--warmup", type=int, default=9,
                   help="untimed rounds of 6 calls: enough for a measuring trial, up to 6 "
                        "candidates x 4 calls x 2 passes (default 9)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per job")
    p.add_argument("--rows", default=None,
                   help="comma list of the forced rows to run (default every row of the "
                        "collectives)")
    p.add_argument("--tunes", default="",
                   help="comma list of GOHCCL_TUNE values to run auto with besides the "
                        "environment's, each as label auto/VALUE, e.g. model,measure")
    p.add_argument("--json", metavar="FILE", help="write every job's times and the table")
    args = p.parse_args(argv)
    args.collectives = args.collectives.split(",")
    bad = [c for c in args.collectives if c not in ROWS]
    if bad:
        p.error(f"--collectives: {', '.join(bad)} not one of {', '.join(ROWS)}")

    rows = sorted({r for c in args.collectives for r in rows_for(c, args.nproc)})
    if args.rows:
        unknown = set(args.rows.split(",")) - set(rows)
        if unknown:
            p.error(f"--rows: {', '.join(sorted(unknown))} not a row of these collectives")
        rows = args.rows.split(",")
    tunes = [f"auto/{t}" for t in args.tunes.split(",") if t]
    labels = ["auto"] + tunes + rows
    times: dict[str, list[dict]] = {lb: [] for lb in labels}
    load = []
    for rep in range(args.reps):
        order = labels[rep % len(labels):] + labels[:rep % len(labels)]
        for lb in order:
            times[lb].append(run_job(args, lb))
            load.append(os.getloadavg()[0])
            print(f"# round {rep + 1}/{args.reps}: {lb} done (load {load[-1]:.1f})", file=sys.stderr, flush=True)

    def median(lb, key):
        xs = [t[key] for t in times[lb] if key in t]
        return statistics.median(xs) if xs else None

    table = []
    print(f"\n{args.nproc} ranks, one job per label, median of {args.reps} rounds, "
          f"load {min(load):.1f}-{max(load):.1f}\n")
    print("| collective | size | auto us (min-max) | best forced row us | auto / best |"
          + "".join(f" {t} us | {t} / best |" for t in tunes))
    print("|---|---|---|---|---|" + "---|---|" * len(tunes))
    for key in sorted(times["auto"][0], key=lambda k: (args.collectives.index(k[0]), k[1])):
        coll, size = key
        auto = median("auto", key)
        span = [t[key] for t in times["auto"] if key in t]
        forced = [(median(r, key), r) for r in rows_for(coll, args.nproc) if r in rows]
        forced = [(t, r) for t, r in forced if t is not None]
        best, row = min(forced)
        ratio = auto / best
        others = {t: median(t, key) for t in tunes}
        table.append(dict(collective=coll, size=size, auto_us=auto, best_us=best, best_row=row,
                          ratio=ratio, forced={r: t for t, r in forced}, tunes=others))
        print(f"| {coll} | {size // 1024} KiB | {auto:.0f} ({min(span):.0f}-{max(span):.0f}) | "
              f"{best:.0f} {row} | {ratio:.2f} |"
              + "".join(f" {others[t]:.0f} | {others[t] / best:.2f} |" for t in tunes))
    worst = max(table, key=lambda r: r["ratio"])
    print(f"\nworst: {worst['collective']} {worst['size'] // 1024} KiB at {worst['ratio']:.2f}; "
          f"within 10% in {sum(r['ratio'] <= 1.1 for r in table)} of {len(table)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(nproc=args.nproc, reps=args.reps, load=load, table=table,
                           jobs={lb: [{f"{k[0]}/{k[1]}": v for k, v in t.items()} for t in ts]
                                 for lb, ts in times.items()}), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
