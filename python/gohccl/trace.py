"""gohccl's flight recorder, from Python: ask for a dump, and read dumps.

Every gohccl communicator keeps its last GOHCCL_TRACE_BUFFER collectives and
sends/receives (docs/trace.md). Each rank writes them, one JSON file per rank
and group, into GOHCCL_TRACE_DIR when a collective times out, ranks mismatch
or a peer is lost; on SIGUSR1 (when GOHCCL_TRACE_DIR is set); and when the
program calls `gohccl.dump_trace()`.

    python -m gohccl.trace DIR

reads every rank's file in DIR and says what went wrong: the first sequence
number at which ranks disagree (kind, dtype, count, op, root) or at which some
ranks never arrived, naming those ranks and their hosts.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import sys
from collections import defaultdict

__all__ = ["dump_trace", "load", "analyse", "main"]

_LIB = None


def _lib():
    """The libgohccl the extension already loaded (the same file, so dlopen
    returns the same handle and the same communicators)."""
    global _LIB
    if _LIB is None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lib", "libgohccl.so")
        lib = ctypes.CDLL(path)
        fn = lib.gohccl_trace_dump
        fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_char_p, ctypes.c_size_t]
        fn.restype = ctypes.c_int
        _LIB = lib
    return _LIB


def dump_trace(dir: str | os.PathLike | None = None) -> list[str]:
    """Write the flight record of every gohccl communicator of this process
    into `dir` (default: GOHCCL_TRACE_DIR as each communicator was created
    with) and return the paths written. It does not wait for collectives in
    progress, so it may be called while one hangs (from a signal handler or
    another thread). Raises RuntimeError naming each communicator it could
    not write."""
    paths = ctypes.create_string_buffer(1 << 16)
    err = ctypes.create_string_buffer(4096)
    arg = None if dir is None else os.fsencode(os.fspath(dir))
    status = _lib().gohccl_trace_dump(arg, paths, len(paths), err, len(err))
    written = [p for p in paths.value.decode(errors="replace").split("\n") if p]
    if status != 0:
        raise RuntimeError(f"gohccl.dump_trace: {err.value.decode(errors='replace')}"
                           + (f" (written: {', '.join(written)})" if written else ""))
    return written


# --------------------------------------------------------------------------
# Reading dumps
# --------------------------------------------------------------------------

def load(directory: str) -> dict[str, dict[int, dict]]:
    """Every dump in directory, as {group id: {rank: dump}}. A file that is
    not a readable gohccl dump is reported on stderr and skipped."""
    groups: dict[str, dict[int, dict]] = defaultdict(dict)
    for path in sorted(glob.glob(os.path.join(directory, "gohccl_trace_*.json"))):
        try:
            with open(path) as f:
                d = json.load(f)
            rank, group = int(d["rank"]), str(d["group"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            print(f"skipping {path}: not a gohccl trace dump ({exc})", file=sys.stderr)
            continue
        d["_path"] = path
        old = groups[group].get(rank)
        if old is None or d.get("time_ns", 0) >= old.get("time_ns", 0):
            groups[group][rank] = d  # the newest dump of a rank wins
    return dict(groups)


def _signature(e: dict) -> tuple:
    """What must be equal on every rank for the same collective."""
    return (e.get("kind"), e.get("dtype"), e.get("count"), e.get("op"), e.get("root"))


def describe(e: dict) -> str:
    """A collective entry in the words of an error message."""
    s = f"{e.get('kind')} {e.get('dtype')} count {e.get('count')}"
    if e.get("op"):
        s += f" op {e['op']}"
    if e.get("root") is not None:
        s += f" root {e['root']}"
    return s


def _ranks(ranks, host_of) -> str:
    ranks = sorted(ranks)
    word = "rank" if len(ranks) == 1 else "ranks"
    return word + " " + ", ".join(f"{r} ({host_of(r)})" for r in ranks)


def analyse(dumps: dict[int, dict]) -> dict:
    """Analyse one group's dumps ({rank: dump}). Returns a dict with
    "verdict" (one line), "details" (lines), and the facts tests check:
    "seq" (the first bad sequence number, or None), "kind" ("disagree",
    "never_arrived", "stuck", "failed" or "ok"), "ranks" (the ranks at fault:
    those that never arrived, or those in the minority), "missing" (ranks
    that wrote no dump)."""
    any_dump = next(iter(dumps.values()))
    size = max(int(d.get("size", 0)) for d in dumps.values())
    hosts = next((d["hosts"] for d in dumps.values() if d.get("hosts")), [])

    def host_of(r):
        if r in dumps and dumps[r].get("host"):
            return dumps[r]["host"]
        return hosts[r] if r < len(hosts) else "host unknown"

    missing = [r for r in range(size) if r not in dumps]
    colls = {r: {e["seq"]: e for e in d.get("entries", []) if e.get("seq", 0) > 0}
             for r, d in dumps.items()}
    last = {r: int(d.get("last_seq", 0)) for r, d in dumps.items()}
    # The window every ring still holds: a ring that dropped records lost
    # the oldest ones, so compare only from the newest of the first seqs.
    lo = max((min(c) if c and dumps[r].get("dropped") else 1) for r, c in colls.items())
    hi = max(last.values(), default=0)
    details = []
    out = {"seq": None, "kind": "ok", "ranks": [], "missing": missing, "group": any_dump.get("group")}

    for s in range(lo, hi + 1):
        present = {r: c[s] for r, c in colls.items() if s in c}
        absent = [r for r in colls if s not in colls[r] and s > last[r]]
        # A refused entry is what a rank issued after the group had already
        # failed: it counts for what the rank meant, not as an arrival.
        late = sorted(r for r, e in present.items() if e.get("state") == "refused")
        by_sig = defaultdict(list)
        for r, e in present.items():
            by_sig[_signature(e)].append(r)
        if len(by_sig) > 1:
            # The largest set of ranks agreeing is taken as what was meant.
            groups = sorted(by_sig.values(), key=lambda rs: (-len(rs), min(rs)))
            minority = sorted(r for rs in groups[1:] for r in rs)
            out.update(seq=s, kind="disagree", ranks=minority)
            verdict = f"ranks disagree at collective #{s}: " + "; ".join(
                f"{_ranks(rs, host_of)} issued {describe(present[rs[0]])}" for rs in groups)
            if absent:
                details.append(f"{_ranks(absent, host_of)} never reached #{s}")
            break
        if absent or late:
            out.update(seq=s, kind="never_arrived", ranks=sorted(absent + late))
            began = [r for r in present if r not in late]
            e = next(iter(present.values()), None)
            what = f" ({describe(e)})" if e else ""
            verdict = (f"{_ranks(absent + late, host_of)} never arrived at collective #{s}{what}; "
                       + (f"{_ranks(began, host_of)} began it" if began else "no rank began it"))
            first = min((present[r]["start_ns"] for r in began), default=None)
            for r in late:
                after = (f", {(present[r]['start_ns'] - first) / 1e9:.1f} s after the first rank began it"
                         if first is not None else "")
                details.append(f"rank {r} issued it only after the group had failed{after}")
            for r in sorted(absent):
                prev = colls[r].get(last[r])
                where = (f"#{last[r]} {describe(prev)}, {prev['state']}" if prev
                         else "no collective yet" if last[r] == 0 else f"#{last[r]}")
                details.append(f"rank {r}: last collective {where}")
            break
    else:
        s = hi
        present = {r: c[s] for r, c in colls.items() if s in c}
        failed = sorted(r for r, e in present.items() if e.get("state") == "failed")
        running = sorted(r for r, e in present.items() if e.get("state") in ("running", "queued"))
        if failed or running:
            e = present[(failed or running)[0]]
            out.update(seq=s, kind="failed" if failed else "stuck", ranks=failed or running)
            verdict = (f"every rank that wrote a dump reached collective #{s} ({describe(e)}); "
                       + (f"it failed on {_ranks(failed, host_of)}" if failed
                          else f"it is still running on {_ranks(running, host_of)}"))
        elif hi == 0:
            verdict = "no collective on record"
        else:
            verdict = f"no disagreement: every rank completed collectives up to #{hi}"
    if out["seq"] is not None:
        for r in sorted(colls):
            e = colls[r].get(out["seq"])
            if e and e.get("awaited"):
                more = f" and {e['awaited_more']} more" if e.get("awaited_more") else ""
                details.append(f"rank {r} ({e['state']}) was waiting for "
                               f"{_ranks(e['awaited'], host_of)}{more}")
    for r, d in sorted(dumps.items()):
        for e in d.get("entries", []):
            if e.get("seq", 0) == 0 and e.get("state") != "done":
                details.append(f"rank {r}: {e['kind']} {'to' if e['kind'] == 'send' else 'from'} "
                               f"rank {e.get('peer')} (tag {e.get('tag')}, {e.get('count')} {e.get('dtype')}) "
                               f"{e['state']}")
    if missing:
        details.append(f"no dump from {_ranks(missing, host_of)}")
    out["verdict"] = verdict
    out["details"] = details
    return out


def report(directory: str) -> tuple[str, list[dict]]:
    """The analysis of every group in directory, as text and as data."""
    groups = load(directory)
    lines, results = [], []
    for group, dumps in sorted(groups.items()):
        res = analyse(dumps)
        results.append(res)
        size = max(int(d.get("size", 0)) for d in dumps.values())
        reasons = defaultdict(list)
        for r, d in sorted(dumps.items()):
            reasons[d.get("reason", "?")].append(r)
        lines.append(f"group {group}: {size} ranks, dumps from {len(dumps)} ("
                     + ", ".join(f"{why}: ranks {','.join(map(str, rs))}" for why, rs in reasons.items()) + ")")
        lines.append("  " + res["verdict"])
        lines += ["    " + d for d in res["details"][:12]]
        if len(res["details"]) > 12:
            lines.append(f"    ... {len(res['details']) - 12} more")
        errors = {d.get("error") for d in dumps.values() if d.get("error")}
        if errors:
            first = min(errors, key=len)
            lines.append("  error: " + (first if len(first) < 300 else first[:297] + "..."))
    return "\n".join(lines), results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gohccl.trace",
        description="Read every rank's gohccl flight record in DIR (GOHCCL_TRACE_DIR) and say "
                    "what went wrong: the first collective at which ranks disagree or at "
                    "which some never arrived, naming those ranks and their hosts.")
    parser.add_argument("dir", help="the directory the ranks dumped into (GOHCCL_TRACE_DIR)")
    parser.add_argument("--json", action="store_true", help="print the analysis as JSON")
    args = parser.parse_args(argv)
    if not os.path.isdir(args.dir):
        print(f"{args.dir}: no such directory", file=sys.stderr)
        return 2
    text, results = report(args.dir)
    if not results:
        print(f"{args.dir}: no gohccl trace dumps (gohccl_trace_*.json) here", file=sys.stderr)
        return 2
    print(json.dumps(results, indent=1) if args.json else text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
