"""No leaks: 100 cycles of init_process_group("gohccl"), a few collectives
and destroy_process_group in one process per rank (world 2), then a
bootstrap that fails because the other rank never arrives.

Each rank measures itself after a warm-up of WARMUP cycles (the Go runtime,
torch and the allocators reach their working set then) and again at the
end, from /proc/self:
  threads  /proc/self/task entries. The Go runtime keeps the OS threads it
           has started (it never exits them) and starts one when every
           thread is blocked, so the count may creep by a thread or two
           over a long run whatever the library does; a leak of one
           thread per cycle would add a hundred. Bound: THREAD_SLACK.
  sockets  /proc/self/fd links to socket:[...]. The FileStore uses none, so
           every socket is gohccl's: none may be open between cycles.
  shm      no /dev/shm/gohccl* mapping left in /proc/self/maps, and no
           communicator segment name left in /dev/shm (names that other
           processes create and remove meanwhile do not count).
  RSS      VmRSS. Bound: RSS_SLACK_MB, see below.
The shim's own queue threads are counted too (gohccl._C._live_threads()):
zero once every process group is destroyed.
"""

import os
import re
import time

import pytest

from harness import launch_cached

TIMEOUT = 300
pytestmark = pytest.mark.timeout(TIMEOUT + 60)

CYCLES = 100
WARMUP = 5
FAILED_BOOTSTRAP_S = 3.0
THREAD_SLACK = 3
# A communicator's scratch (GOHCCL_BUFFSIZE, megabytes) and its
# shared-memory segment are freed or unmapped at destroy, but the Go heap
# returns freed pages to the kernel lazily (its scavenger) and glibc keeps
# freed chunks in its arenas, so RSS after a cycle varies by a few MB with
# no leak at all. One leaked scratch buffer per cycle would add hundreds of
# MB over 100 cycles and one leaked 64 KiB frame buffer 6 MB; 8 MB is above
# the noise measured here (under 3 MB) and below the smallest per-cycle
# leak that matters.
RSS_SLACK_MB = 8


def _measure():
    import gohccl
    fds = os.listdir("/proc/self/fd")
    sockets = 0
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                sockets += 1
        except OSError:
            pass  # the directory's own descriptor, closed by now
    with open("/proc/self/maps") as f:
        mapped = sorted({line.split(None, 5)[5].strip() for line in f
                         if len(line.split(None, 5)) == 6 and "/dev/shm/gohccl" in line})
    rss_kb = 0
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
    return {"threads": len(os.listdir("/proc/self/task")), "sockets": sockets, "mapped": mapped,
            "shm": _segment_names(), "rss_mb": rss_kb / 1024, "queue_threads": gohccl._C._live_threads()}


# A communicator's segment: gohccl- then its 16-byte id in hex, then the
# host's lowest rank (goimpl/comm/local.go segmentName).
SEGMENT = re.compile(r"^gohccl-[0-9a-f]{32}-\d+")


def _segment_names():
    """The communicator segments in /dev/shm now and still a second later:
    other processes on this machine (other tests) make and remove their
    own, which must not count."""
    def names():
        try:
            return {n for n in os.listdir("/dev/shm") if SEGMENT.match(n)}
        except OSError:
            return set()
    first = names()
    if not first:
        return []
    time.sleep(1.0)
    return sorted(first & names())


def _cycle(ctx, i, during=None):
    import torch
    import torch.distributed as dist
    ctx.init(name=f"cycle-{i}")
    r, ws = ctx.rank, ctx.world_size
    t = torch.full((1000,), float(r + 1))
    dist.all_reduce(t)
    ok = bool(torch.all(t == float(ws * (ws + 1) // 2)))
    b = torch.full((33,), float(r))
    dist.broadcast(b, src=1)
    ok = ok and bool(torch.all(b == 1.0))
    outs = [torch.zeros(5, dtype=torch.int64) for _ in range(ws)]
    dist.all_gather(outs, torch.full((5,), r, dtype=torch.int64))
    ok = ok and [int(o[0]) for o in outs] == list(range(ws))
    peer = (r + 1) % ws
    got = torch.zeros(7)
    works = [dist.isend(torch.full((7,), float(r)), dst=peer), dist.irecv(got, src=(r - 1) % ws)]
    for w in works:
        w.wait()
    ok = ok and bool(torch.all(got == float((r - 1) % ws)))
    dist.barrier()
    if during is not None:
        pg = dist.distributed_c10d._get_default_group()
        during["describe"] = pg._get_backend(torch.device("cpu")).describe()
        during.update(_measure())
        # No rank destroys before every rank has measured: a peer's close
        # ends this rank's connections to it (CI once saw 0 sockets).
        dist.barrier()
    dist.destroy_process_group()
    return ok


def _leaks(ctx):
    import datetime
    import torch.distributed as dist
    out = {"wrong": []}
    for i in range(WARMUP):
        if not _cycle(ctx, i):
            out["wrong"].append(i)
    out["start"] = _measure()
    out["during"] = {}
    for i in range(WARMUP, WARMUP + CYCLES):
        if not _cycle(ctx, i, out["during"] if i == WARMUP else None):
            out["wrong"].append(i)
        if i == WARMUP + CYCLES // 2:
            out["middle"] = _measure()
    out["end"] = _measure()

    # A bootstrap whose other rank never arrives: rank 0 tries, rank 1
    # waits on the side until it is over. torch's first failed init costs
    # about 8-10 MB of RSS once, whatever the backend (its error path
    # loads and symbolizes a C++ backtrace; Gloo's measures the same
    # here), so the first failure is the warm-up and the second is the
    # one measured against it: a per-failure leak shows there.
    done = os.path.join(ctx.workdir, "failed-bootstrap-done")
    if ctx.rank == 0:
        for attempt in ("failed_warmup", "failed"):
            start = time.time()
            try:
                dist.init_process_group("gohccl", init_method=ctx.init_method(f"never-{attempt}"), rank=0,
                                        world_size=ctx.world_size,
                                        timeout=datetime.timedelta(seconds=FAILED_BOOTSTRAP_S))
                out[attempt] = {"message": None}
            except Exception as exc:  # noqa: BLE001
                out[attempt] = {"message": f"{type(exc).__name__}: {exc}"}
            out[attempt]["elapsed"] = time.time() - start
            out[attempt]["initialized"] = dist.is_initialized()
            time.sleep(0.5)  # goroutines of the failed bootstrap wind down
            out[f"after_{attempt}"] = _measure()
        open(done, "w").close()
    else:
        deadline = time.time() + 120
        while not os.path.exists(done) and time.time() < deadline:
            time.sleep(0.05)
    return out


def leak_results(backend):
    return launch_cached("leaks", _leaks, 2, backend, timeout=TIMEOUT, init=False, destroy=False)


def _check_flat(before, after, what, rss=True):
    assert after["queue_threads"] == 0, f"{what}: {after['queue_threads']} shim queue threads left"
    assert after["threads"] <= before["threads"] + THREAD_SLACK, (
        f"{what}: {after['threads']} threads, {before['threads']} after warm-up")
    assert after["sockets"] <= before["sockets"], (
        f"{what}: {after['sockets']} sockets open, {before['sockets']} after warm-up")
    assert not after["mapped"], f"{what}: shared memory still mapped: {after['mapped']}"
    left = sorted(set(after["shm"]) - set(before["shm"]))
    assert not left, f"{what}: left in /dev/shm: {left}"
    grown = after["rss_mb"] - before["rss_mb"]
    assert not rss or grown < RSS_SLACK_MB, (
        f"{what}: RSS grew {grown:.1f} MB ({before['rss_mb']:.1f} -> {after['rss_mb']:.1f} MB)")


def test_cycles_leave_nothing(backend):
    if backend != "gohccl":
        pytest.skip("measures gohccl's own threads, sockets and segments")
    for r, o in enumerate(leak_results(backend)):
        assert not o["wrong"], f"rank {r}: wrong results in cycles {o['wrong']}"
        # No growth in the second half either: a slow leak shows as a slope.
        _check_flat(o["start"], o["middle"], f"rank {r}, cycle {WARMUP + CYCLES // 2}")
        _check_flat(o["start"], o["end"], f"rank {r}, after {CYCLES} cycles")
        assert o["start"]["sockets"] == 0, f"rank {r}: sockets open between cycles: {o['start']}"
        # The measures see what they look for: while a communicator lives,
        # its sockets, and its segment where the ranks share memory.
        d = o["during"]
        assert d["sockets"] > 0, f"rank {r}: no socket seen during a cycle: {d}"
        if "shm:" in d["describe"]:
            assert d["mapped"], f"rank {r}: no segment mapping seen during a cycle: {d}"


def test_failed_bootstrap_times_out_clearly_and_leaves_nothing(backend):
    if backend != "gohccl":
        pytest.skip("measures gohccl's own threads, sockets and segments")
    o = leak_results(backend)[0]
    f = o["failed"]
    assert f["message"], "init_process_group succeeded without rank 1"
    assert not f["initialized"], "a failed init left a default process group"
    assert FAILED_BOOTSTRAP_S * 0.5 < f["elapsed"] < FAILED_BOOTSTRAP_S + 10, f
    msg = f["message"].lower()
    assert "rank 1" in msg, f"the error does not name the missing rank: {f['message']}"
    assert any(w in msg for w in ("timed out", "timeout", "deadline")), f"not a timeout: {f['message']}"
    # Threads, sockets and segments against the warm-up cycles; RSS
    # against the first failure (see _leaks).
    _check_flat(o["start"], o["after_failed"], "after the failed bootstraps", rss=False)
    _check_flat(o["after_failed_warmup"], o["after_failed"], "after the second failed bootstrap")
