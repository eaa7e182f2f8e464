"""fork: a child forked from a process that loaded gohccl must fail at once,
with a sentence saying why, whether it uses a gohccl group it inherited or
creates a new one (the Go runtime inside libgohccl does not survive fork);
and the parent's group goes on working. Every child is bounded in time: it
is killed and the test fails if it has not exited within CHILD_LIMIT_S."""

import pytest

from harness import attempt, case_results, launch_cached

CHILD_LIMIT_S = 20.0
pytestmark = pytest.mark.timeout(180)

# Exit codes of the child.
REFUSED, NOT_REFUSED, OTHER_ERROR = 0, 3, 4


def _in_child(action):
    """Forks; the child runs action() and exits with REFUSED when it raised
    an error that names fork, NOT_REFUSED when it returned, OTHER_ERROR for
    any other error. Returns (exit code or 'killed', the child's message)."""
    import os
    import select
    import signal
    import time
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the harness
        os.close(rfd)
        code, msg = OTHER_ERROR, ""
        try:
            action()
            code, msg = NOT_REFUSED, "returned"
        except Exception as exc:  # noqa: BLE001
            msg = f"{type(exc).__name__}: {exc}"
            code = REFUSED if "fork" in msg else OTHER_ERROR
        os.write(wfd, msg.encode()[:4000])
        os._exit(code)
    os.close(wfd)
    deadline = time.monotonic() + CHILD_LIMIT_S
    msg = b""
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if select.select([rfd], [], [], 0.05)[0]:
            msg += os.read(rfd, 4096)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(rfd)
            return "killed", msg.decode(errors="replace")
    while chunk := os.read(rfd, 4096):
        msg += chunk
    os.close(rfd)
    return os.waitstatus_to_exitcode(status), msg.decode(errors="replace")


def _sweep(ctx):
    import datetime

    import torch
    import torch.distributed as dist

    out = {}

    def inherited():
        dist.all_reduce(torch.ones(4))

    def new_group():
        # The creator init_process_group and new_group call for "gohccl",
        # on a store of the child's own.
        creator = dist.Backend._plugins["GOHCCL"].creator_fn
        creator(dist.HashStore(), 0, 1, datetime.timedelta(seconds=5))

    for name, action in (("inherited", inherited), ("new", new_group)):
        out[name] = attempt(_in_child, action)
    # The parent's group was not disturbed.
    t = torch.full((3,), float(ctx.rank + 1))
    dist.all_reduce(t)
    out["after"] = t.tolist()
    return out


@pytest.mark.parametrize("case", ["inherited", "new"])
def test_forked_child_is_refused(backend, case):
    if backend != "gohccl":
        pytest.skip("gohccl's behaviour")
    world = 2
    res = launch_cached("fork", _sweep, world, backend, timeout=150)
    for r, (code, msg) in enumerate(case_results(res, case, case)):
        assert code == REFUSED, f"rank {r}'s child ({case}): exit {code}, {msg!r}"
        assert "spawn" in msg and "Go runtime" in msg, f"rank {r}: the refusal does not say why: {msg!r}"
    want = [float(sum(range(1, world + 1)))] * 3
    for r, v in enumerate(case_results(res, "after", "after")):
        assert v == want, f"rank {r}: all_reduce after the children: {v}"
