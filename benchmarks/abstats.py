"""Pools the jobs of benchmarks/ab.sh and compares each variant with a base.

For every (collective, ranks, size) it prints the base's median over jobs,
each other variant's median, their ratio, a permutation test's p (how often
the ratio is at least this far from 1 when the jobs' labels are shuffled:
small means the variants differ beyond the jobs' spread) and a bootstrap 90%
interval of the ratio. A figure is one job's gohccl time (the bench's
time_us: the slowest rank's median of its samples), so a job counts once
however many samples it had. With --stat min it is the job's fastest sample
instead (time_us_min: the slowest rank's fastest block of calls): what the
build costs when nothing in the job got in its way, which moves less from
one job to the next on a shared VM than the median does, so a step of a
microsecond shows in fewer jobs (the median still says what users see).
Rows that had wrong elements are counted and reported, never dropped
silently.

    .venv/bin/python benchmarks/abstats.py build/ab [--base before] [--label gohccl] [--stat min]
"""

import argparse
import collections
import csv
import math
import os
import random
import statistics
import sys


# What --stat reads from a row.
STATS = {"median": "time_us", "min": "time_us_min"}


def load(directory, label, stat="median"):
    """{(collective, nranks, size): {variant: [the stat's figure per job]}}, wrong elements."""
    column = STATS[stat]
    cells = collections.defaultdict(lambda: collections.defaultdict(list))
    wrong = 0
    for name in sorted(os.listdir(directory)):
        if not name.endswith(".csv"):
            continue
        variant = name.split(".")[0]
        with open(os.path.join(directory, name), newline="") as f:
            for row in csv.DictReader(f):
                if row["label"] != label or row.get("skipped"):
                    continue
                wrong += int(row["wrong"] or 0)
                key = (row["collective"], int(row["nranks"]), int(row["size"]))
                cells[key][variant].append(float(row[column]))
    return cells, wrong


def compare(base, other, rng, trials=2000):
    """Ratio of medians other/base, permutation p, bootstrap 90% interval."""
    ratio = statistics.median(other) / statistics.median(base)
    pooled, n = base + other, len(base)
    far = 0
    for _ in range(trials):
        rng.shuffle(pooled)
        r = statistics.median(pooled[n:]) / statistics.median(pooled[:n])
        far += abs(math.log(r)) >= abs(math.log(ratio)) - 1e-12
    boot = sorted(
        statistics.median(rng.choices(other, k=len(other)))
        / statistics.median(rng.choices(base, k=len(base)))
        for _ in range(trials))
    return ratio, far / trials, (boot[int(0.05 * trials)], boot[int(0.95 * trials)])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dir", help="benchmarks/ab.sh's output folder")
    ap.add_argument("--base", help="the variant the others are compared with (default: the first by name)")
    ap.add_argument("--label", default="gohccl", help="the bench label to compare (default gohccl)")
    ap.add_argument("--stat", choices=sorted(STATS), default="median",
                    help="a job's figure: its median time (default) or its fastest sample")
    args = ap.parse_args(argv)
    cells, wrong = load(args.dir, args.label, args.stat)
    variants = sorted({v for c in cells.values() for v in c})
    if not variants:
        sys.exit(f"abstats: no rows labelled {args.label!r} in {args.dir}")
    base = args.base or variants[0]
    if base not in variants:
        sys.exit(f"abstats: no variant {base!r} in {args.dir} (found {', '.join(variants)})")
    rng = random.Random(1)
    print(f"# {args.dir}: base {base}; a job's figure: its {STATS[args.stat]}; wrong elements in all rows: {wrong}")
    print("# ratio = variant median / base median over jobs; p from shuffling the jobs' labels")
    print(f"{'collective':15}{'ranks':>6}{'bytes':>10}{base:>12}  variant: median ratio p [90%] jobs")
    shown = 0
    for key in sorted(cells):
        got = cells[key]
        if len(got.get(base, [])) < 3:
            continue
        shown += 1
        line = f"{key[0]:15}{key[1]:6}{key[2]:10}{statistics.median(got[base]):12.1f}"
        for v in variants:
            if v == base or len(got.get(v, [])) < 3:
                continue
            ratio, p, (lo, hi) = compare(got[base], got[v], rng)
            line += f"  {v}: {statistics.median(got[v]):.1f} {ratio:.2f} p={p:.3f} [{lo:.2f}-{hi:.2f}] {len(got[v])}/{len(got[base])}"
        print(line)
    if not shown:
        print(f"# no cell has 3 jobs of {base} yet: run benchmarks/ab.sh with more rounds")


if __name__ == "__main__":
    main()
