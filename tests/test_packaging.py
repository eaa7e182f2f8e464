"""The package as a user meets it: the backend found through torch's entry
point without `import gohccl`, in fresh processes under torchrun."""

import json
import os
import signal
import subprocess
import sys

import pytest
import torch

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))


def torchrun(args, nproc=2, timeout=120, env=None, python=sys.executable):
    """Runs `python -m torch.distributed.run` on this host and returns the
    completed process. The launcher and its ranks form one process group,
    killed whole when the deadline passes."""
    cmd = [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", *args]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         start_new_session=True, env=env)
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        pytest.fail(f"torchrun did not finish within {timeout}s:\n{out[-4000:]}")
    return subprocess.CompletedProcess(cmd, p.returncode, out, None)


def run_entry_point_job(tmp_path, backend, **kw):
    r = torchrun([os.path.join(TESTS_DIR, "packaging_worker.py"), backend, str(tmp_path)], **kw)
    assert r.returncode == 0, r.stdout[-4000:]
    ranks = [json.load(open(tmp_path / f"rank{i}.json")) for i in range(2)]
    for i, rep in enumerate(ranks):
        assert not rep["imported_before"], f"rank {i} had gohccl imported before init_process_group"
        assert rep["imported_after"], f"rank {i}: the entry point did not load gohccl"
        assert rep["size"] == 2
        failed = [k for k, ok in rep["checks"].items() if not ok]
        assert not failed, f"rank {i}: results differ from numpy in {failed}"
    return ranks


@pytest.mark.timeout(150)
def test_entry_point_plain_name(tmp_path):
    ranks = run_entry_point_job(tmp_path, "gohccl")
    assert {r["cpu_backend"] for r in ranks} == {"ProcessGroupGoHCCL"}


@pytest.mark.timeout(150)
def test_entry_point_device_pairs(tmp_path):
    # The "device:backend" form registers each named backend in its own
    # pass. NCCL needs a GPU; without one the CUDA half names Gloo, which
    # walks the same path for the gohccl half.
    other = "nccl" if torch.cuda.is_available() else "gloo"
    ranks = run_entry_point_job(tmp_path, f"cpu:gohccl,cuda:{other}")
    assert {r["cpu_backend"] for r in ranks} == {"ProcessGroupGoHCCL"}


def test_entry_point_declared():
    from importlib.metadata import entry_points
    eps = [e for e in entry_points(group="torch.distributed.backends") if e.name == "gohccl"]
    assert len(eps) == 1, "gohccl is not installed with its torch.distributed.backends entry point"
    assert eps[0].value == "gohccl:_register_backend"
