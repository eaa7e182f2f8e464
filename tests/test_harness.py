"""The harness itself: a failing rank is reported with its traceback, a hung
rank is killed at the deadline with its stack, and nothing is left behind."""

import glob
import os
import time

import pytest

from harness import WorkerFailure, launch


def _one_rank_fails(ctx):
    if ctx.rank == 1:
        raise ValueError("boom from rank 1")
    time.sleep(120)


def _everyone_hangs(ctx):
    time.sleep(300)


def _workdirs():
    return set(glob.glob(os.path.join(os.environ.get("TMPDIR", "/tmp"), "gohccl-test-*")))


@pytest.mark.timeout(60)
def test_failing_rank_reported_and_others_killed():
    before = _workdirs()
    start = time.monotonic()
    with pytest.raises(WorkerFailure) as info:
        launch(_one_rank_fails, 2, "gloo", init=False, timeout=50, grace=1.0)
    elapsed = time.monotonic() - start
    text = str(info.value)
    assert "boom from rank 1" in text and "rank 1/2 (exit code 1)" in text, text
    assert "rank 0/2 (killed by the harness)" in text, text
    assert "_one_rank_fails" in text, "rank 0's stack dump is missing:\n" + text
    assert elapsed < 40, f"the harness took {elapsed:.1f}s to give up after rank 1 failed"
    assert _workdirs() <= before, "a launch left its work directory behind"


@pytest.mark.timeout(60)
def test_deadline_kills_hung_ranks():
    start = time.monotonic()
    with pytest.raises(WorkerFailure) as info:
        launch(_everyone_hangs, 2, "gloo", init=False, timeout=12)
    elapsed = time.monotonic() - start
    text = str(info.value)
    assert "deadline of 12s passed" in text, text
    assert text.count("killed by the harness") == 2, text
    assert "_everyone_hangs" in text, "the hung ranks' stacks are missing:\n" + text
    assert elapsed < 30, f"the deadline of 12s took {elapsed:.1f}s"
