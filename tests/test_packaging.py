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


# ---- the tools: python -m gohccl.sim, python -m gohccl.info ----

REPO_ROOT = os.path.dirname(TESTS_DIR)


def run_module(args, env_extra=None, timeout=120, python=sys.executable, cwd=None):
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run([python, "-m", *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=cwd or str(TESTS_DIR))


SIM_ARGS = ["-nodes", "2", "-per-node", "3", "-bytes", "64K", "-algos", "ring,rhd,level0:ring;level1:ring"]


@pytest.mark.timeout(180)
def test_sim_same_as_go_command():
    """python -m gohccl.sim prints what the Go command gohccl-sim prints for
    the same options (schedules whose simulation is deterministic)."""
    import shutil
    go = os.environ.get("GO") or shutil.which("go")
    if not go:
        pytest.skip("no Go toolchain to run the gohccl-sim command as the reference")
    for extra in ([], ["-json"]):
        mine = run_module(["gohccl.sim", *SIM_ARGS, *extra])
        assert mine.returncode == 0, mine.stderr
        ref = subprocess.run([go, "run", "./goimpl/sim/cmd/gohccl-sim", *SIM_ARGS, *extra], cwd=REPO_ROOT,
                             capture_output=True, text=True, timeout=150)
        assert ref.returncode == 0, ref.stderr
        assert mine.stdout == ref.stdout
        # text: the header, the titles, 3 rows, the tuner's line; JSON: 3 rows and the tuner's
        assert mine.stdout.count("\n") == (4 if extra else 6)


def test_sim_bad_option_named():
    r = run_module(["gohccl.sim", "-coll", "gossip"])
    assert r.returncode == 2
    assert r.stdout == ""
    assert 'gohccl-sim: -coll "gossip": allreduce, broadcast, allgather or reducescatter' in r.stderr


def test_info_host():
    env = {"GOHCCL_BUFFSIZE": "12Q", "GOHCCL_ALGO": "ring", "GOHCCL_BUFSIZE": "8M"}
    for k in list(os.environ):
        if k.startswith("GOHCCL_") and k not in env:
            env[k] = ""  # unset for the report: an empty value reads as the default
    text = run_module(["gohccl.info"], env)
    assert text.returncode == 1, text.stderr  # a malformed variable
    out = text.stdout
    assert f"torch version: {torch.__version__}" in out
    assert "gohccl version: 0.1.0" in out and "built with go1." in out
    assert 'GOHCCL_BUFFSIZE=12Q  [environment]  MALFORMED: GOHCCL_BUFFSIZE: "12Q" is not a byte count' in out
    assert "GOHCCL_ALGO=ring  [environment]\n" in out
    assert "GOHCCL_DEBUG=WARN  [default]\n" in out
    assert "GOHCCL_BUFSIZE=8M  [environment]  UNKNOWN" in out
    assert "reduce kernels: this CPU runs scalar" in out and "chosen: " in out
    assert "shared memory /dev/shm: " in out

    rep = json.loads(run_module(["gohccl.info", "--json"], env).stdout)
    st = os.statvfs("/dev/shm")
    assert rep["shm"]["total"] == st.f_blocks * st.f_frsize
    byname = {v["name"]: v for v in rep["variables"]}
    assert [v["name"] for v in rep["variables"] if v.get("error")] == ["GOHCCL_BUFFSIZE"]
    assert byname["GOHCCL_TRANSPORT"] == {"name": "GOHCCL_TRANSPORT", "value": "auto", "default": "auto",
                                          "source": "default"}
    assert rep["torch"]["version"] == torch.__version__
    with open("/proc/cpuinfo") as f:
        flags = next(line for line in f if line.startswith("flags")).split()
    features = set(rep["cpu"]["features"])
    # cpuid's names against the kernel's flags, for the ones the kernels use
    for theirs, ours in (("avx2", "AVX2"), ("avx512f", "AVX512F"), ("f16c", "F16C")):
        assert (theirs in flags) == (ours in features), theirs
    paths = rep["reduce"]["paths"]
    assert rep["reduce"]["chosen"] == paths[-1]
    assert ("avx512" in paths) == all(f in flags for f in ("avx512f", "avx512bw", "avx512dq"))


@pytest.mark.timeout(180)
def test_info_under_torchrun(tmp_path):
    """Under torchrun the report adds every rank's topology, links and the
    algorithm table, from a communicator the report creates."""
    env = dict(os.environ, GOHCCL_RANKS_PER_NODE="1", GOHCCL_ALGO="ring")
    r = torchrun(["-m", "gohccl.info", "--json"], env=env)
    assert r.returncode == 0, r.stdout[-4000:]
    start = r.stdout.index("{\n")
    rep = json.JSONDecoder().raw_decode(r.stdout[start:])[0]
    ranks = rep["ranks"]
    assert [rk["Rank"] for rk in ranks] == [0, 1]
    for rk in ranks:
        assert rk["Topology"] == "2 nodes x 1 ranks"
        assert rk["Nodes"] == [[0], [1]]
        assert rk["Links"][rk["Rank"]] == "self"
        assert rk["Links"][1 - rk["Rank"]] in ("shm", "tcp")
        assert rk["Algo"] == "ring"
    assert ranks[0]["pid"] != ranks[1]["pid"]
    table = ranks[0]["Table"]
    assert table[0].startswith("allreduce [4KiB, 8KiB) on 2 ranks (2 nodes): ")
    assert table[0].endswith("-> ring") or "-> ring/" in table[0]
    assert any(line.startswith("reducescatter ") for line in table)
