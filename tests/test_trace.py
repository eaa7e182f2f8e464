"""The flight recorder (docs/trace.md): jobs that go wrong in the three usual
ways (a rank skips a collective, a rank sleeps past the timeout, ranks issue
different kinds), each rank's dump in GOHCCL_TRACE_DIR, and the analyser
(`python -m gohccl.trace DIR`) naming the sequence number and the ranks at
fault. Also a dump asked for from Python and by SIGUSR1.

Each worker counts the collectives it issues, so the sequence number the
analyser must name is known independently of the dumps."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from harness import launch

TIMEOUT = 120
PG_TIMEOUT_S = 4.0  # the group timeout: every op's deadline
pytestmark = pytest.mark.timeout(TIMEOUT + 60)
WORLD = 3


def _all_reduce(n, counter):
    import torch
    import torch.distributed as dist
    t = torch.ones(n)
    counter.append(n)
    dist.all_reduce(t)
    return t


def _attempt(fn):
    try:
        fn()
        return None
    except Exception as exc:  # noqa: BLE001 - the failure is the point
        return f"{type(exc).__name__}: {exc}"


def job_skip(ctx):
    """Ranks 0 and 1 run a 5-element all-reduce that rank 2 skips; rank 2's
    next, a 7-element one, meets theirs."""
    issued = []
    _all_reduce(8, issued)
    bad_seq = len(issued) + 1
    err = None
    if ctx.rank != 2:
        err = _attempt(lambda: _all_reduce(5, issued))
    if err is None:
        err = _attempt(lambda: _all_reduce(7, issued))
    return {"bad_seq": bad_seq, "error": err}


def job_sleep(ctx):
    """Rank 2 sleeps past the group timeout before the second all-reduce."""
    issued = []
    _all_reduce(8, issued)
    bad_seq = len(issued) + 1
    if ctx.rank == 2:
        time.sleep(PG_TIMEOUT_S + 2.0)
    err = _attempt(lambda: _all_reduce(6, issued))
    return {"bad_seq": bad_seq, "error": err}


def job_kinds(ctx):
    """As its second collective rank 2 broadcasts while the others all-reduce."""
    import torch
    import torch.distributed as dist
    issued = []
    _all_reduce(8, issued)
    bad_seq = len(issued) + 1
    if ctx.rank == 2:
        err = _attempt(lambda: dist.broadcast(torch.ones(4), src=0))
    else:
        err = _attempt(lambda: _all_reduce(4, issued))
    return {"bad_seq": bad_seq, "error": err}


def _run(job, tmp_path):
    trace_dir = str(tmp_path / "trace")
    results = launch(job, WORLD, "gohccl", timeout=TIMEOUT, pg_timeout=PG_TIMEOUT_S,
                     env={"GOHCCL_TRACE_DIR": trace_dir})
    return trace_dir, results


def _analyse(trace_dir):
    proc = subprocess.run([sys.executable, "-m", "gohccl.trace", trace_dir, "--json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    text = subprocess.run([sys.executable, "-m", "gohccl.trace", trace_dir],
                          capture_output=True, text=True, timeout=60)
    assert text.returncode == 0, text.stderr
    results = json.loads(proc.stdout)
    assert len(results) == 1, f"expected one group's dumps: {results}"
    return results[0], text.stdout


def _dumps(trace_dir):
    files = sorted(f for f in os.listdir(trace_dir) if f.startswith("gohccl_trace_"))
    dumps = {}
    for f in files:
        with open(os.path.join(trace_dir, f)) as fh:
            d = json.load(fh)
        dumps[d["rank"]] = d
        assert f"rank{d['rank']}" in f and socket.gethostname().replace("/", "_") in f, f
    return dumps


def test_skipped_collective(tmp_path):
    trace_dir, results = _run(job_skip, tmp_path)
    bad = results[0]["bad_seq"]
    assert all(r["bad_seq"] == bad for r in results)
    assert all(r["error"] for r in results), results  # every rank failed
    dumps = _dumps(trace_dir)
    assert sorted(dumps) == [0, 1, 2]
    res, text = _analyse(trace_dir)
    assert res["kind"] == "disagree", text
    assert res["seq"] == bad, text
    assert res["ranks"] == [2], text
    assert f"#{bad}" in text and "rank 2 (" in text and socket.gethostname() in text, text
    assert "count 5" in text and "count 7" in text, text


def test_rank_sleeps_past_timeout(tmp_path):
    trace_dir, results = _run(job_sleep, tmp_path)
    bad = results[0]["bad_seq"]
    for r in (0, 1):
        assert results[r]["error"] and "#%d" % bad in results[r]["error"], results[r]
    dumps = _dumps(trace_dir)
    assert {0, 1} <= set(dumps)
    assert any("timeout" in dumps[r]["reason"] for r in (0, 1)), [d["reason"] for d in dumps.values()]
    if 2 in dumps:  # written when it woke and found the group broken
        assert dumps[2]["last_seq"] == bad - 1
    res, text = _analyse(trace_dir)
    assert res["kind"] == "never_arrived", text
    assert res["seq"] == bad, text
    assert res["ranks"] == [2], text
    assert f"never arrived at collective #{bad}" in text, text


def test_different_kinds(tmp_path):
    trace_dir, results = _run(job_kinds, tmp_path)
    bad = results[0]["bad_seq"]
    assert all(r["error"] for r in results), results
    res, text = _analyse(trace_dir)
    assert res["kind"] == "disagree", text
    assert res["seq"] == bad, text
    assert res["ranks"] == [2], text
    assert "broadcast" in text and "allreduce" in text, text


def job_requested(ctx, out_dir):
    """A healthy job: a dump from gohccl.dump_trace and one by SIGUSR1, with
    a Python SIGUSR1 handler installed first that must still run."""
    import torch
    import torch.distributed as dist
    import gohccl
    seen = []
    signal.signal(signal.SIGUSR1, lambda *_: seen.append(True))
    ctx.init()
    issued = []
    _all_reduce(3, issued)
    dist.broadcast(torch.arange(5.0), src=1)
    paths = gohccl.dump_trace(out_dir) if ctx.rank == 0 else []
    signal_dump = None
    if ctx.rank == 1:
        trace_dir = os.environ["GOHCCL_TRACE_DIR"]
        os.kill(os.getpid(), signal.SIGUSR1)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not (signal_dump and seen):
            time.sleep(0.05)
            found = [f for f in os.listdir(trace_dir) if f.startswith("gohccl_trace_")] \
                if os.path.isdir(trace_dir) else []
            signal_dump = os.path.join(trace_dir, found[0]) if found else None
    dist.barrier()
    return {"paths": paths, "signal_dump": signal_dump, "python_handler_ran": bool(seen),
            "issued": len(issued)}


def test_dump_requested_and_by_signal(tmp_path):
    out_dir = str(tmp_path / "asked")
    trace_dir = str(tmp_path / "signal")
    results = launch(job_requested, WORLD, "gohccl", args=(out_dir,), init=False, timeout=TIMEOUT,
                     env={"GOHCCL_TRACE_DIR": trace_dir})
    paths = results[0]["paths"]
    assert len(paths) == 1 and paths[0].startswith(out_dir), paths
    with open(paths[0]) as f:
        d = json.load(f)
    assert d["rank"] == 0 and d["size"] == WORLD and d["reason"] == "request"
    colls = [e for e in d["entries"] if e["seq"] > 0]
    assert [(e["kind"], e["count"], e["state"]) for e in colls] == \
        [("allreduce", 3, "done"), ("broadcast", 5, "done")]
    assert colls[1]["root"] == 1 and colls[0]["algo"]
    r1 = results[1]
    assert r1["signal_dump"], "SIGUSR1 wrote no dump"
    assert r1["python_handler_ran"], "the Python SIGUSR1 handler installed before gohccl was not called"
    with open(r1["signal_dump"]) as f:
        d = json.load(f)
    assert d["rank"] == 1 and d["reason"] == "signal SIGUSR1"
    assert [e["kind"] for e in d["entries"] if e["seq"] > 0][:2] == ["allreduce", "broadcast"]


def test_analyser_without_dumps(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "gohccl.trace", str(tmp_path)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no gohccl trace dumps" in proc.stderr
