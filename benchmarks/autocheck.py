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
back to the automatic choice, and is left out), and the row auto ran with
the best row by the median and by the mean over rounds: on a crowded host
some rows land 10-20x slower in a third of their jobs, which the median
does not see.

Speed is shown, never asserted: docs/algorithms.md quotes a run.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
    "broadcast": ["mesh.oneshot", "mesh.eager", "mesh.singlecopy", "ring", "binomial", "tree", "dtree"],
}


def rows_for(coll: str, nproc: int) -> list[str]:
    return [r for r in ROWS[coll] if nproc == 2 or r != "mesh.singlecopy"]


# A choice line of GOHCCL_DEBUG=INFO (goimpl/tune: the priced table, or a
# trial's measured one, then "-> row", and after a trial when it will be
# measured again), rank 0's.
CHOICE = re.compile(r"^\[gohccl 0/\d+\] INFO (\w+) \[(\d+)(B|KiB|MiB|GiB), .* -> (\S+)"
                    r"(?: \(measured again after \d+ more ops\))?$")
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}
TUNER_NAMES = {"allreduce": "all_reduce", "allgather": "all_gather",
               "reducescatter": "reduce_scatter", "broadcast": "broadcast"}


def choices(log: str) -> dict:
    """The rows an automatic job ran: {(collective, size class's low
    bound): row}, the last line of a class winning (a trial's measured
    line follows the priced one). A row's segment ("ring/1MiB") is
    dropped, as forced labels name none."""
    out = {}
    for line in log.splitlines():
        m = CHOICE.match(line.strip())
        if m and m.group(1) in TUNER_NAMES:
            low = int(m.group(2)) * UNITS[m.group(3)]
            out[(TUNER_NAMES[m.group(1)], low)] = m.group(4).split("/")[0]
    return out


def chosen(picks: dict, coll: str, size: int):
    """The row picks holds for coll at size: its class is [2^(k-1), 2^k)."""
    return picks.get((coll, 1 << (size.bit_length() - 1))) if size else None


def over_rounds(times: dict, label: str, key, stat, picks=None):
    """stat (statistics.median or statistics.fmean) of label's jobs at key,
    None where none ran it. With picks (a forced row's), only the jobs whose
    log says they ran that row there count: a row that cannot carry the size
    (mesh.eager past 64 KiB) falls back to the automatic choice, which is
    not that row."""
    xs = [t[key] for i, t in enumerate(times[label]) if key in t
          and (picks is None or chosen(picks[label][i], *key) in (None, label))]
    return stat(xs) if xs else None


def forced_best(times: dict, rows: list[str], key, stat, picks=None) -> tuple[float, str, dict]:
    """The forced rows' figures at key by stat over their jobs, and the
    smallest: (best, its row, {row: figure}). The median says what a
    typical job gets; the mean weighs in the jobs that land several times
    slower, which on a crowded host some rows do in a third of their jobs
    (docs/algorithms.md), so both are reported."""
    byrow = {r: t for r in rows if (t := over_rounds(times, r, key, stat, picks)) is not None}
    row = min(byrow, key=byrow.get)
    return byrow[row], row, byrow


def run_job(args, label: str) -> tuple[dict, dict]:
    """One gohccl.bench job of one label: {(collective, size): us}, and the
    rows it ran (see choices). A label auto/T runs the automatic choice with
    GOHCCL_TUNE=T."""
    env = dict(os.environ, GOHCCL_DEBUG="INFO")
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
    times = {(r["collective"], r["size"]): r["time_us"] for r in doc["results"] if r["time_us"]}
    return times, choices(done.stderr)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--reps", type=int, default=3, help="rounds of one job per label (default 3)")
    p.add_argument("-c", "--collectives", default="all_reduce,all_gather,reduce_scatter,broadcast")
    p.add_argument("-b", "--minbytes", default="4K")
    p.add_argument("-e", "--maxbytes", default="16M")
    p.add_argument("-n", "--iters", type=int, default=10)
    p.add_argument("-w", "--warmup", type=int, default=9,
                   help="untimed rounds of 6 calls, after the measuring trial that "
                        "gohccl.bench runs untimed first (default 9)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per job")
    p.add_argument("--rows", default=None,
                   help="comma list of the forced rows to run (default every row of the "
                        "collectives)")
    p.add_argument("--tunes", default="",
                   help="comma list of GOHCCL_TUNE values to run auto with besides the "
                        "environment's, each as label auto/VALUE, e.g. model,measure")
    p.add_argument("--json", metavar="FILE", help="write every job's times and the table")
    p.add_argument("--load", metavar="FILE", action="append", default=[],
                   help="run nothing: pool the jobs of these --json files (of one world size) "
                        "and print their table")
    args = p.parse_args(argv)
    if args.load:
        args.nproc, rows, tunes, times, picks, load = pool(args.load)
        args.collectives = [c for c in ROWS if any(k[0] == c for t in times["auto"] for k in t)]
        return report(args, rows, tunes, times, picks, load)
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
    picks: dict[str, list[dict]] = {lb: [] for lb in labels}
    load = []
    for rep in range(args.reps):
        order = labels[rep % len(labels):] + labels[:rep % len(labels)]
        for lb in order:
            t, c = run_job(args, lb)
            times[lb].append(t)
            picks[lb].append(c)
            load.append(os.getloadavg()[0])
            print(f"# round {rep + 1}/{args.reps}: {lb} done (load {load[-1]:.1f})", file=sys.stderr, flush=True)
    return report(args, rows, tunes, times, picks, load)


def pool(files: list[str]):
    """The jobs of several --json files as one run: (world size, rows,
    tunes, times, picks, load), for report."""
    docs = []
    for name in files:
        with open(name) as f:
            docs.append(json.load(f))
    if len({d["nproc"] for d in docs}) != 1:
        raise SystemExit(f"--load: {', '.join(files)} ran on different world sizes")

    def keyed(d: dict) -> dict:
        return {(k.split("/")[0], int(k.split("/")[1])): v for k, v in d.items()}
    times: dict[str, list[dict]] = {}
    picks: dict[str, list[dict]] = {}
    for d in docs:
        for lb, jobs in d["jobs"].items():
            times.setdefault(lb, []).extend(keyed(j) for j in jobs)
            picks.setdefault(lb, []).extend(keyed(c) for c in d["picks"].get(lb, [{}] * len(jobs)))
    tunes = [lb for lb in times if lb.startswith("auto/")]
    rows = [lb for lb in times if lb != "auto" and lb not in tunes]
    return docs[0]["nproc"], rows, tunes, times, picks, [x for d in docs for x in d["load"]]


def report(args, rows, tunes, times, picks, load) -> int:
    """Prints the table of a run's jobs (and writes --json)."""
    def ran(lb, key):
        """The row lb's jobs ran most often at key, and in how many rounds."""
        rs = [chosen(c, *key) for c in picks[lb]]
        rs = [r for r in rs if r]
        if not rs:
            return None, 0
        r = max(set(rs), key=rs.count)
        return r, rs.count(r)

    table = []
    print(f"\n{args.nproc} ranks, one job per label, {len(times['auto'])} rounds, "
          f"load {min(load):.1f}-{max(load):.1f}\n")
    print("auto / best: the automatic jobs' median over the best forced row's. ran / best: the\n"
          "forced jobs of the row the automatic ones ran (GOHCCL_DEBUG=INFO), over the best: the\n"
          "same comparison without the spread between two sets of jobs that run the same code;\n"
          "by the median, then by the mean over the rounds (the best row by the mean named where\n"
          "it is another).\n")
    labels_t = ["auto"] + tunes
    print("| collective | size | best forced row us |"
          + "".join(f" {t} us (min-max) | ran | {t} / best | ran / best | by the mean |" for t in labels_t))
    print("|---|---|---|" + "---|---|---|---|---|" * len(labels_t))
    keys = {k for t in times["auto"] for k in t}
    for key in sorted(keys, key=lambda k: (args.collectives.index(k[0]), k[1])):
        coll, size = key
        cands = [r for r in rows_for(coll, args.nproc) if r in rows]
        best, row, byrow = forced_best(times, cands, key, statistics.median, picks)
        mbest, mrow, bymean = forced_best(times, cands, key, statistics.fmean, picks)
        line = f"| {coll} | {size // 1024} KiB | {best:.0f} {row} |"
        res = dict(collective=coll, size=size, best_us=best, best_row=row, forced=byrow,
                   best_mean_us=mbest, best_mean_row=mrow, forced_mean=bymean)
        for lb in labels_t:
            span = [x[key] for x in times[lb] if key in x]
            t = statistics.median(span)
            r, k = ran(lb, key)
            rr = byrow[r] / best if r in byrow else None
            rm = bymean[r] / mbest if r in bymean else None
            res[lb] = dict(us=t, ratio=t / best, ran=r, ran_rounds=k, ran_ratio=rr, ran_ratio_mean=rm)
            line += (f" {t:.0f} ({min(span):.0f}-{max(span):.0f}) | {r or '?'}"
                     f"{'' if k == len(span) else f' ({k}/{len(span)})'} | {t / best:.2f} | "
                     f"{'n/a' if rr is None else f'{rr:.2f}'} | "
                     f"{'n/a' if rm is None else f'{rm:.2f}'}{'' if mrow == row else f' ({mrow} {mbest:.0f})'} |")
        res["ratio"] = res["auto"]["ratio"]
        table.append(res)
        print(line)
    for lb in labels_t:
        worst = max(table, key=lambda r: r[lb]["ratio"])
        rrs = [r[lb]["ran_ratio"] for r in table if r[lb]["ran_ratio"] is not None]
        rms = [r[lb]["ran_ratio_mean"] for r in table if r[lb]["ran_ratio_mean"] is not None]
        print(f"\n{lb}: worst {worst['collective']} {worst['size'] // 1024} KiB at {worst[lb]['ratio']:.2f}; "
              f"within 10% in {sum(r[lb]['ratio'] <= 1.1 for r in table)} of {len(table)}; "
              f"the row it ran within 10% in {sum(x <= 1.1 for x in rrs)} of {len(rrs)} by the median, "
              f"{sum(x <= 1.1 for x in rms)} of {len(rms)} by the mean")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(nproc=args.nproc, reps=len(times["auto"]), load=load, table=table,
                           picks={lb: [{f"{k[0]}/{k[1]}": v for k, v in c.items()} for c in cs]
                                  for lb, cs in picks.items()},
                           jobs={lb: [{f"{k[0]}/{k[1]}": v for k, v in t.items()} for t in ts]
                                 for lb, ts in times.items()}), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
