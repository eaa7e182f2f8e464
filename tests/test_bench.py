"""Tests of gohccl.bench, the nccl-tests style benchmark.

Two kinds:
  pure     the busbw formulas, size parsing, buffer layouts and the --check
           arithmetic, against values computed by hand. The package is loaded
           from its folder, so this process never imports gohccl (and so never
           starts a Go runtime that a later fork could break).
  command  `python -m gohccl.bench --nproc 2 ...` on a tiny sweep, as a user
           runs it: it launches torchrun, which starts the two ranks. Each
           run has a deadline; on expiry the whole process group is
           terminated, then killed, and the ranks (which torchrun starts in
           sessions of their own) exit by themselves once torchrun is gone.

The commands measure `backend` (GOHCCL_TEST_BACKENDS, default gohccl) next to
Gloo. With GOHCCL_TEST_BACKENDS=gloo they run the bench from its folder, so a
gohccl that does not build yet is never imported.
"""

import importlib.util
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import tempfile

import pytest

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(TESTS_DIR)
BENCH_PATH = os.path.join(REPO_ROOT, "python", "gohccl", "bench")


def _load_bench():
    spec = importlib.util.spec_from_file_location(
        "_gohccl_bench_under_test", os.path.join(BENCH_PATH, "__init__.py"),
        submodule_search_locations=[BENCH_PATH])
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up by name
    spec.loader.exec_module(mod)
    return mod


bench = _load_bench()


def _load_script(name):
    """benchmarks/<name>.py as a module, without running its main."""
    spec = importlib.util.spec_from_file_location(
        f"_{name}_under_test", os.path.join(REPO_ROOT, "benchmarks", f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# Every field a row of --json carries.
ROW_FIELDS = {
    "collective", "size", "count", "dtype", "type", "redop", "root", "label", "backend",
    "algo", "time_us", "time_us_median", "time_us_mean", "time_us_min", "algbw", "busbw",
    "wrong", "speedup_vs_gloo", "iters", "warmup", "block", "nranks", "skipped",
}


# --------------------------------------------------------------------------
# Pure functions
# --------------------------------------------------------------------------

@pytest.mark.timeout(30)
@pytest.mark.parametrize("collective, nranks, factor", [
    ("all_reduce", 1, 0.0),
    ("all_reduce", 2, 1.0),        # 2*(2-1)/2
    ("all_reduce", 4, 1.5),        # 2*3/4
    ("all_reduce", 8, 1.75),       # 2*7/8
    ("all_reduce", 3, 4.0 / 3.0),  # 2*2/3
    ("all_gather", 2, 0.5),
    ("all_gather", 4, 0.75),
    ("reduce_scatter", 8, 0.875),
    ("reduce_scatter", 3, 2.0 / 3.0),
    ("all_to_all", 2, 0.5),
    ("all_to_all", 16, 0.9375),
    ("broadcast", 8, 1.0),
    ("reduce", 8, 1.0),
    ("sendrecv", 2, 1.0),
    ("sendrecv", 8, 1.0),
])
def test_bus_factor(collective, nranks, factor):
    assert bench.bus_factor(collective, nranks) == pytest.approx(factor, rel=1e-12)


@pytest.mark.timeout(30)
def test_bandwidths_hand_computed():
    # 1e9 bytes in one second is 1 GB/s (decimal) of algbw.
    assert bench.bandwidths("all_reduce", 10**9, 1.0, 4) == pytest.approx((1.0, 1.5))
    # 32 MiB all_reduce in 10 ms on 2 ranks: 33554432 / 0.01 / 1e9 = 3.3554432 GB/s,
    # busbw the same (factor 1 at n=2).
    alg, bus = bench.bandwidths("all_reduce", 32 << 20, 0.01, 2)
    assert alg == pytest.approx(3.3554432)
    assert bus == pytest.approx(3.3554432)
    # all_gather of 1 MiB total in 1 ms on 4 ranks: algbw 1.048576, busbw * 3/4.
    alg, bus = bench.bandwidths("all_gather", 1 << 20, 1e-3, 4)
    assert alg == pytest.approx(1.048576)
    assert bus == pytest.approx(0.786432)
    # broadcast: busbw equals algbw whatever the ranks.
    assert bench.bandwidths("broadcast", 4000, 2e-6, 16) == pytest.approx((2.0, 2.0))
    # all_to_all 8 KiB in 4 us on 8 ranks: 2.048 GB/s, busbw * 7/8 = 1.792.
    assert bench.bandwidths("all_to_all", 8192, 4e-6, 8) == pytest.approx((2.048, 1.792))
    with pytest.raises(ValueError):
        bench.bus_factor("gather", 2)


@pytest.mark.timeout(30)
def test_parse_size_and_sweep():
    assert bench.parse_size("8") == 8
    assert bench.parse_size("64K") == 65536
    assert bench.parse_size("32M") == 33554432
    assert bench.parse_size("1G") == 1 << 30
    assert bench.parse_size("32MB") == 33554432
    assert bench.parse_size("4k") == 4096
    for bad in ("", "M", "1.5M", "-8", "8X"):
        with pytest.raises(ValueError):
            bench.parse_size(bad)
    assert bench.sweep_sizes(8, 128, 2) == [8, 16, 32, 64, 128]
    assert bench.sweep_sizes(8, 100, 4) == [8, 32]
    assert bench.sweep_sizes(1 << 20, 3 << 20, None, 1 << 20) == [1 << 20, 2 << 20, 3 << 20]
    with pytest.raises(ValueError):
        bench.sweep_sizes(64, 8, 2)


@pytest.mark.timeout(30)
def test_layout_follows_nccl_tests():
    # all_gather: size is the gathered output, count the per-rank count.
    assert bench.layout("all_gather", 1024, 4, 4) == bench.Layout(64, 64, 256, 1024)
    # reduce_scatter of 100 bytes of float on 3 ranks: 25 elements, 8 per rank.
    assert bench.layout("reduce_scatter", 100, 4, 3) == bench.Layout(8, 24, 8, 96)
    # all_to_all: the whole send buffer, count per peer.
    assert bench.layout("all_to_all", 64, 2, 2) == bench.Layout(16, 32, 32, 64)
    assert bench.layout("all_reduce", 10, 4, 8) == bench.Layout(2, 2, 2, 8)
    assert bench.layout("sendrecv", 8, 8, 2) == bench.Layout(1, 1, 1, 8)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("collective", bench.COLLECTIVES)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "uint8", "int64"])
def test_check_expectation_matches_a_reference_computed_here(collective, dtype):
    """expected_result against the collective's definition, applied here with
    plain torch ops to every rank's inputs; and count_wrong notices a change."""
    import torch
    n, nbytes = 3, 96
    tdtype = getattr(torch, dtype)
    lay = bench.layout(collective, nbytes, bench.ELEMENT_SIZE[dtype], n)
    ops = ["sum", "prod", "max", "min"] if collective in bench.REDUCING else [None]
    for op in ops:
        inputs = []
        for r in range(n):
            buf = bench.make_buffers(collective, lay, dtype)
            bench.fill_for_check(collective, buf, dtype, op, r, n)
            inputs.append(buf.send.clone())
        c = lay.count
        for rank in range(n):
            if collective in ("all_reduce", "reduce", "reduce_scatter"):
                stack = torch.stack([x.to(torch.float64) for x in inputs])
                red = {"sum": stack.sum(0), "prod": stack.prod(0),
                       "max": stack.max(0).values, "min": stack.min(0).values}[op]
                ref = red[rank * c:(rank + 1) * c] if collective == "reduce_scatter" else red
                if collective == "reduce" and rank != 0:
                    ref = None
            elif collective == "broadcast":
                ref = inputs[0]
            elif collective == "all_gather":
                ref = torch.cat(inputs)
            elif collective == "all_to_all":
                ref = torch.cat([x[rank * c:(rank + 1) * c] for x in inputs])
            else:  # sendrecv: from the previous rank
                ref = inputs[(rank - 1) % n]
            exp = bench.expected_result(collective, lay, op, 0, rank, n)
            if ref is None:
                assert exp is None
                continue
            got = ref.to(tdtype)
            assert bench.count_wrong(got, exp, dtype, op, n) == 0, (op, rank)
            bad = got.clone()
            bad[-1] = bad[-1] + 1
            assert bench.count_wrong(bad, exp, dtype, op, n) == 1, (op, rank)


@pytest.mark.timeout(30)
def test_check_tolerance_for_float_sums():
    import torch
    exp = torch.tensor([3.0, 300.0], dtype=torch.float64)
    # bfloat16 cannot hold 301 exactly; a sum/avg may round; prod/max/min may not.
    got = torch.tensor([3.0, 300.0], dtype=torch.bfloat16)
    assert bench.count_wrong(got, exp, "bfloat16", "sum", 2) == 0
    off = torch.tensor([3.0, 304.0], dtype=torch.bfloat16)  # one bfloat16 ulp at 300 is 2
    assert bench.count_wrong(off, exp, "bfloat16", "sum", 2) == 0
    way_off = torch.tensor([3.0, 320.0], dtype=torch.bfloat16)
    assert bench.count_wrong(way_off, exp, "bfloat16", "sum", 2) == 1
    assert bench.count_wrong(off, exp, "bfloat16", "max", 2) == 1
    nan = torch.tensor([float("nan"), 300.0], dtype=torch.float32)
    assert bench.count_wrong(nan, exp, "float32", "sum", 2) == 1


@pytest.mark.timeout(30)
def test_cli_refuses_bad_arguments():
    for argv in (["-b", "1X"], ["-b", "64", "-e", "8"], ["-c", "gather"], ["-o", "xor"],
                 ["-d", "complex64"], ["-o", "avg", "-d", "int32"], ["-f", "2", "-i", "1K"],
                 ["--algo", "ring", "--backends", "gloo"], ["-n", "0"]):
        with pytest.raises(SystemExit) as exc:
            bench.parse_args(argv)
        assert exc.value.code == 2, argv
    opts = bench.parse_args(["-o", "all", "-d", "int32,float", "-c", "allreduce,alltoall"])
    assert opts.ops == ["sum", "prod", "max", "min", "avg"]  # avg skipped for int32 at run time
    assert opts.collectives == ["all_reduce", "all_to_all"]
    assert opts.dtypes == ["int32", "float32"]
    assert opts.sizes[0] == 8 and opts.sizes[-1] == 32 << 20


# --------------------------------------------------------------------------
# The command, end to end
# --------------------------------------------------------------------------

def _bench_command(backend: str) -> list[str]:
    if backend == "gohccl":
        return [sys.executable, "-m", "gohccl.bench"]
    return [sys.executable, BENCH_PATH]


def _backends_arg(backend: str) -> str:
    return ",".join(dict.fromkeys([backend, "gloo"]))


def run_bench(args: list[str], backend: str, env: dict | None = None, timeout: float = 150.0):
    """run_bench runs the bench command and returns (rc, stdout, stderr); on
    its deadline it ends the whole process group and fails the test."""
    child_env = dict(os.environ)
    child_env.update({"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
                      "GLOO_SOCKET_IFNAME": "lo"})
    child_env.pop("GOHCCL_BENCH_CORRUPT", None)
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        child_env.pop(var, None)
    if env:
        child_env.update(env)
    proc = subprocess.Popen(_bench_command(backend) + args, cwd=REPO_ROOT, env=child_env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end_group(proc)
        out, err = proc.communicate()
        pytest.fail(f"bench did not finish within {timeout:.0f}s: {args}\n"
                    f"--- stdout ---\n{out[-4000:]}\n--- stderr ---\n{err[-4000:]}")
    finally:
        if proc.poll() is None:
            _end_group(proc)
    return proc.returncode, out, err


def _end_group(proc):
    # SIGTERM first: the launcher passes it to torchrun, which stops its ranks.
    for sig, wait in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _explain(rc, out, err):
    return f"rc={rc}\n--- stdout ---\n{out[-6000:]}\n--- stderr ---\n{err[-6000:]}"


TINY = ["--nproc", "2", "-b", "8", "-e", "1K", "-f", "8", "-n", "3", "-w", "1",
        "--timeout", "60", "--no-progress"]


@pytest.fixture
def workdir():
    with tempfile.TemporaryDirectory(prefix="gohccl-bench-test-") as d:
        yield d


@pytest.mark.timeout(200)
def test_cli_small_sweep_json_and_csv(backend, workdir):
    js, cs = os.path.join(workdir, "out.json"), os.path.join(workdir, "out.csv")
    rc, out, err = run_bench(TINY + ["-c", "all", "--check", "--backends", _backends_arg(backend),
                                     "--json", js, "--csv", cs], backend)
    assert rc == 0, _explain(rc, out, err)
    with open(js) as f:
        doc = json.load(f)
    labels = list(dict.fromkeys([backend, "gloo"]))
    assert doc["tool"] == "gohccl.bench"
    assert doc["nranks"] == 2
    assert doc["labels"] == labels
    assert doc["stat"] == "median"
    assert doc["iters"] == 3 and doc["warmup"] == 1 and doc["check"] is True
    assert doc["minbytes"] == 8 and doc["maxbytes"] == 1024 and doc["stepfactor"] == 8
    assert len(doc["load_average_start"]) == 3
    rows = doc["results"]
    assert rows, doc
    for row in rows:
        assert set(row) == ROW_FIELDS, row
    seen = {(r["collective"], r["size"], r["label"]) for r in rows}
    for collective in bench.COLLECTIVES:
        sizes = sorted({r["size"] for r in rows if r["collective"] == collective})
        assert sizes, f"no rows for {collective}"
        for size in sizes:
            for label in labels:
                assert (collective, size, label) in seen
    first = (rows[0]["collective"], rows[0]["size"])
    for r in rows:
        what = f"{r['collective']} {r['size']} {r['label']}"
        # The run's first row warms up longer (bench.warmup_rounds).
        want_warmup = bench.FIRST_WARMUP_ROUNDS if (r["collective"], r["size"]) == first else 1
        assert r["nranks"] == 2 and r["iters"] == 3 and r["warmup"] == want_warmup, what
        assert r["dtype"] == "float32" and r["type"] == "float"
        assert r["redop"] == ("sum" if r["collective"] in bench.REDUCING else "none")
        assert r["root"] == (0 if r["collective"] in bench.ROOTED else -1)
        assert r["wrong"] == 0, what
        assert r["time_us"] > 0 and r["time_us"] == r["time_us_median"], what
        assert 0 < r["time_us_min"] <= r["time_us_median"] * (1 + 1e-9), what
        assert r["algbw"] == pytest.approx(r["size"] / (r["time_us"] * 1e-6) / 1e9), what
        assert r["busbw"] == pytest.approx(
            r["algbw"] * bench.bus_factor(r["collective"], 2)), what
        assert r["count"] * bench.ELEMENT_SIZE[r["dtype"]] * (
            2 if r["collective"] in ("all_gather", "reduce_scatter", "all_to_all") else 1
        ) == r["size"], what
        if r["backend"] == "gloo":
            assert r["speedup_vs_gloo"] is None
        else:
            g = next(x for x in rows if x["label"] == "gloo" and x["collective"] == r["collective"]
                     and x["size"] == r["size"])
            assert r["speedup_vs_gloo"] == pytest.approx(g["time_us"] / r["time_us"]), what
    # The table on stdout: nccl-tests' columns, one block per collective.
    assert "#       size         count      type   redop    root" in out
    assert "Wrong elements       : 0 OK" in out
    for collective in bench.COLLECTIVES:
        assert f"# {collective}:" in out
    if backend != "gloo":
        assert "speedup" in out and "vs gloo" in out
    with open(cs) as f:
        lines = [line for line in f.read().splitlines() if line]
    assert lines[0].split(",") == bench.ROW_FIELDS
    assert len(lines) == len(rows) + 1


@pytest.mark.timeout(200)
def test_check_counts_a_corrupted_result(backend, workdir):
    js = os.path.join(workdir, "out.json")
    rc, out, err = run_bench(
        TINY + ["-c", "all_reduce,reduce", "--check", "--backends", _backends_arg(backend),
                "--json", js], backend, env={"GOHCCL_BENCH_CORRUPT": backend})
    assert rc == 1, _explain(rc, out, err)
    assert "FAILED" in out
    with open(js) as f:
        rows = json.load(f)["results"]
    for r in rows:
        if r["label"] == backend:
            # One wrong element on each rank whose result is defined: both
            # ranks for all_reduce, the root only for reduce.
            assert r["wrong"] == (2 if r["collective"] == "all_reduce" else 1), r
        else:
            assert r["wrong"] == 0, r


@pytest.mark.timeout(200)
def test_without_check_nothing_is_verified_and_mpi_is_skipped(backend, workdir):
    """Without --check the hook has nothing to corrupt and #wrong is N/A; and
    mpi, asked for outside mpirun, is left out with a note, not an error."""
    js = os.path.join(workdir, "out.json")
    rc, out, err = run_bench(TINY + ["-e", "64", "--backends", _backends_arg(backend) + ",mpi",
                                     "--json", js], backend,
                             env={"GOHCCL_BENCH_CORRUPT": "*"})
    assert rc == 0, _explain(rc, out, err)
    with open(js) as f:
        doc = json.load(f)
    assert doc["check"] is False
    assert doc["results"] and all(r["wrong"] is None for r in doc["results"])
    assert "not checked" in out and " N/A" in out
    assert "mpi" not in doc["labels"]
    assert any(n.startswith("mpi skipped") for n in doc["notes"]), doc["notes"]
    assert "# mpi skipped" in out


@pytest.mark.timeout(200)
def test_algo_creates_one_group_per_value(backend, workdir):
    if backend != "gohccl":
        pytest.skip("--algo selects gohccl algorithms")
    js = os.path.join(workdir, "out.json")
    rc, out, err = run_bench(TINY + ["-e", "4K", "-c", "all_reduce,all_gather", "--check",
                                     "--algo", "auto,ring", "--backends", "gohccl,gloo",
                                     "--json", js], backend)
    assert rc == 0, _explain(rc, out, err)
    with open(js) as f:
        doc = json.load(f)
    assert doc["labels"] == ["gohccl/auto", "gohccl/ring", "gloo"]
    algos = {(r["label"], r["algo"]) for r in doc["results"]}
    assert algos == {("gohccl/auto", "auto"), ("gohccl/ring", "ring"), ("gloo", None)}
    assert all(r["wrong"] == 0 for r in doc["results"])


def _have_matplotlib() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


@pytest.mark.timeout(60)
def test_plot_without_matplotlib_says_so(backend, workdir):
    if _have_matplotlib():
        pytest.skip("matplotlib is installed here")
    png = os.path.join(workdir, "out.png")
    rc, out, err = run_bench(TINY + ["--backends", _backends_arg(backend), "--plot", png],
                             backend, timeout=50)
    assert rc == 2, _explain(rc, out, err)
    assert "matplotlib" in err and "not installed" in err
    assert not os.path.exists(png)


@pytest.mark.timeout(200)
def test_plot_is_written(backend, workdir):
    if not _have_matplotlib():
        pytest.skip("matplotlib is not installed (it is not a dependency of make test)")
    png = os.path.join(workdir, "out.png")
    rc, out, err = run_bench(TINY + ["-c", "all_reduce,broadcast", "--backends",
                                     _backends_arg(backend), "--plot", png], backend)
    assert rc == 0, _explain(rc, out, err)
    with open(png, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(120)
def test_single_rank_in_process(backend, workdir):
    js = os.path.join(workdir, "out.json")
    rc, out, err = run_bench(["--nproc", "1", "-b", "64", "-e", "256", "-n", "2", "-w", "0",
                              "--check", "-c", "all", "--no-progress", "--backends",
                              _backends_arg(backend), "--json", js], backend)
    assert rc == 0, _explain(rc, out, err)
    with open(js) as f:
        doc = json.load(f)
    assert doc["nranks"] == 1 and doc["launcher"] == "single process"
    assert "sendrecv skipped" in out
    for r in doc["results"]:
        assert r["wrong"] == 0
        if r["collective"] == "all_reduce":
            assert r["busbw"] == 0.0  # 2(n-1)/n is 0 at n=1
    assert not math.isnan(sum(r["time_us"] for r in doc["results"]))


FOUR = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")


@pytest.mark.timeout(200)
def test_compute_threads_run_beside_checked_collectives(backend, workdir):
    """--compute-threads: the threads multiply matrices through the sweep (the
    rate they kept up is reported per rank) while every label's results are
    still verified."""
    js = os.path.join(workdir, "out.json")
    rc, out, err = run_bench(TINY + ["-e", "256", "-c", ",".join(FOUR), "--check", "--block", "1",
                                     "--compute-threads", "1", "--compute-size", "96",
                                     "--backends", _backends_arg(backend), "--json", js],
                             backend)
    assert rc == 0, _explain(rc, out, err)
    with open(js) as f:
        doc = json.load(f)
    assert doc["compute_threads"] == 1 and doc["compute_size"] == 96
    assert len(doc["compute_gflops"]) == 2 and all(g > 0 for g in doc["compute_gflops"])
    assert "# contention: 1 compute thread(s) per rank" in out
    assert "Compute kept up" in out and "Wrong elements       : 0 OK" in out
    labels = list(dict.fromkeys([backend, "gloo"]))
    seen = {(r["collective"], r["label"]) for r in doc["results"]}
    assert seen == {(c, lb) for c in FOUR for lb in labels}
    assert all(r["wrong"] == 0 for r in doc["results"])


@pytest.mark.timeout(300)
def test_oversubscribed_four_ranks_with_compute_catch_a_wrong_result(backend, workdir):
    """4 ranks and a compute thread each, on however few cores: the run ends,
    says it is oversubscribed where it is, and --check still catches the one
    element corrupted on every rank of one label, and only there."""
    js = os.path.join(workdir, "out.json")
    rc, out, err = run_bench(
        ["--nproc", "4", "-b", "64", "-e", "64", "-n", "2", "-w", "1", "--block", "1",
         "--timeout", "150",
         "--no-progress", "-c", ",".join(FOUR), "--check", "--compute-threads", "1",
         "--compute-size", "64", "--backends", _backends_arg(backend), "--json", js],
        backend, env={"GOHCCL_BENCH_CORRUPT": backend}, timeout=280)
    assert rc == 1, _explain(rc, out, err)
    with open(js) as f:
        doc = json.load(f)
    assert doc["nranks"] == 4 and len(doc["compute_gflops"]) == 4
    if doc["cpus_usable"] < 8:
        assert "# oversubscribed: 4 ranks x 2 busy thread(s) = 8" in out
    for r in doc["results"]:
        assert r["wrong"] == (4 if r["label"] == backend else 0), r


@pytest.mark.timeout(30)
def test_compute_options_refuse_bad_values():
    for argv in (["--compute-threads", "-1"], ["--compute-size", "0"]):
        with pytest.raises(SystemExit):
            bench.parse_args(argv)
    opts = bench.parse_args(["--compute-threads", "2"])
    assert opts.compute_threads == 2 and opts.compute_size == 1024


def _mpi_python():
    """The mpirun on PATH and whether this interpreter has mpi4py, or None."""
    import shutil
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if mpirun is None or importlib.util.find_spec("mpi4py") is None:
        return None
    return mpirun


@pytest.mark.timeout(200)
def test_mpi_under_mpirun(backend, workdir):
    mpirun = _mpi_python()
    if mpirun is None:
        pytest.skip("needs mpirun on PATH and mpi4py in this Python")
    js = os.path.join(workdir, "out.json")
    cmd = [mpirun, "-np", "2"] + _bench_command(backend)
    env = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    if os.geteuid() == 0:
        # Open MPI refuses root without both of these.
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    proc = subprocess.Popen(cmd + ["-b", "8", "-e", "1K", "-f", "8", "-n", "3", "-w", "1",
                                   "-c", "all", "--check", "--no-progress", "--timeout", "60",
                                   "--backends", _backends_arg(backend) + ",mpi", "--json", js],
                            cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        _end_group(proc)
        out, err = proc.communicate()
        pytest.fail(f"mpirun bench did not finish\n{out[-3000:]}\n{err[-3000:]}")
    finally:
        if proc.poll() is None:
            _end_group(proc)
    assert proc.returncode == 0, _explain(proc.returncode, out, err)
    with open(js) as f:
        doc = json.load(f)
    assert doc["launcher"] == "mpirun" and doc["nranks"] == 2
    assert doc["labels"][-1] == "mpi"
    mpi_rows = [r for r in doc["results"] if r["label"] == "mpi"]
    assert {r["collective"] for r in mpi_rows} == set(bench.COLLECTIVES)
    assert all(r["wrong"] == 0 for r in doc["results"])


def test_warmup_rounds():
    """-w holds for every row but the run's first, which warms up for at
    least FIRST_WARMUP_BYTES per call, up to FIRST_WARMUP_ROUNDS rounds."""
    opts = bench.parse_args(["-w", "5"])
    assert bench.warmup_rounds(opts, 4096, first=False) == 5
    assert bench.warmup_rounds(opts, 4096, first=True) == bench.FIRST_WARMUP_ROUNDS
    assert bench.warmup_rounds(opts, 64 << 10, first=True) == 16
    assert bench.warmup_rounds(opts, 1 << 20, first=True) == 5
    assert bench.warmup_rounds(opts, 64 << 20, first=True) == 5


def test_autocheck_reads_the_row_a_trial_kept():
    """benchmarks/autocheck.py reports the row an automatic job ran from its
    GOHCCL_DEBUG=INFO lines: a trial's measured line wins over the priced
    one, also when it says when the class will be measured again (lines as
    goimpl/tune writes them, from a 2-rank run)."""
    autocheck = _load_script("autocheck")
    log = "\n".join([
        "[gohccl 1/2] INFO allreduce [1MiB, 2MiB) on 2 ranks (1 nodes): mesh.oneshot 64.5us -> mesh.singlecopy",
        "[gohccl 0/2] INFO allreduce [1MiB, 2MiB) on 2 ranks (1 nodes): mesh.oneshot 64.5us, "
        "mesh.twophase 62.5us, ring/1MiB 385.7us -> mesh.twophase",
        "[gohccl 0/2] INFO allreduce [1MiB, 2MiB): measuring mesh.oneshot, mesh.twophase, 16 ops in a row each, 3 passes",
        "[gohccl 0/2] INFO allreduce [1MiB, 2MiB) on 2 ranks (1 nodes): measured (slowest rank's medians of 15 "
        "in a row, in each of 3 passes; the median pass counts): mesh.oneshot 87.6us/71.4us/76.5us, "
        "mesh.twophase 135.3us/122.9us/132.1us -> mesh.oneshot (measured again after 26132 more ops)",
        "[gohccl 0/2] INFO broadcast [16KiB, 32KiB) on 2 ranks (1 nodes): mesh.oneshot 7.1us, ring/1MiB 9.0us -> ring/1MiB",
    ])
    picks = autocheck.choices(log)
    assert picks == {("all_reduce", 1 << 20): "mesh.oneshot", ("broadcast", 16 << 10): "ring"}
    assert autocheck.chosen(picks, "all_reduce", 1536 << 10) == "mesh.oneshot"
    assert autocheck.chosen(picks, "broadcast", 4096) is None


def test_autocheck_ranks_rows_by_the_median_and_by_the_mean():
    """benchmarks/autocheck.py's best forced row by each statistic: a row
    that is fastest in most jobs but 20x slower in some is best by the
    median and not by the mean (4-rank broadcast jobs on 2 cores look like
    this); a row that never ran the size is left out."""
    autocheck = _load_script("autocheck")
    key = ("broadcast", 4096)
    times = {
        "binomial": [{key: 12.0}, {key: 13.0}, {key: 400.0}, {key: 18.0}, {key: 250.0}],
        "mesh.oneshot": [{key: 30.0}, {key: 40.0}, {key: 36.0}, {key: 27.0}, {key: 42.0}],
        "tree": [{}, {}],
    }
    rows = ["binomial", "mesh.oneshot", "tree"]
    best, row, byrow = autocheck.forced_best(times, rows, key, statistics.median)
    assert (best, row) == (18.0, "binomial")
    assert byrow == {"binomial": 18.0, "mesh.oneshot": 36.0}
    best, row, bymean = autocheck.forced_best(times, rows, key, statistics.fmean)
    assert row == "mesh.oneshot"
    assert best == pytest.approx(35.0)
    assert bymean["binomial"] == pytest.approx(138.6)


def test_autocheck_drops_a_forced_row_that_fell_back():
    """A forced row that cannot carry a size (the eager broadcast past 64
    KiB) runs the automatic choice there; its log says so, and autocheck.py
    does not count those jobs as the row's."""
    autocheck = _load_script("autocheck")
    log = "\n".join([
        "[gohccl 0/4] INFO broadcast [64KiB, 128KiB) on 4 ranks (1 nodes): mesh.eager 3.6us "
        "(GOHCCL_ALGO allows mesh.eager) -> mesh.eager",
        "[gohccl 0/4] INFO broadcast [16MiB, 32MiB) on 4 ranks (1 nodes): mesh.oneshot 2.1ms, "
        "mesh.eager n/a (GOHCCL_ALGO's mesh.eager cannot run) -> mesh.oneshot",
    ])
    picks = autocheck.choices(log)
    small, large = ("broadcast", 65536), ("broadcast", 16 << 20)
    times = {"mesh.eager": [{small: 40.0, large: 2000.0}], "mesh.oneshot": [{small: 50.0, large: 2500.0}]}
    forced = {"mesh.eager": [picks], "mesh.oneshot": [{}]}
    rows = ["mesh.eager", "mesh.oneshot"]
    assert autocheck.forced_best(times, rows, small, statistics.median, forced)[:2] == (40.0, "mesh.eager")
    best, row, byrow = autocheck.forced_best(times, rows, large, statistics.median, forced)
    assert (best, row) == (2500.0, "mesh.oneshot")
    assert "mesh.eager" not in byrow
    # Without the logs (a --json of an older run), every job counts.
    assert autocheck.forced_best(times, rows, large, statistics.median)[1] == "mesh.eager"


def test_autocheck_pools_the_jobs_of_its_json_files(tmp_path, capsys):
    """autocheck.py --load pools the rounds of several runs' --json files
    into one table, and refuses files of different world sizes."""
    autocheck = _load_script("autocheck")
    files = []
    for i, (auto, ring, oneshot) in enumerate([(40.0, 18.0, 36.0), (44.0, 400.0, 38.0)]):
        doc = dict(nproc=4, reps=1, load=[1.0], table=[],
                   picks={"auto": [{"broadcast/4096": "mesh.oneshot"}], "ring": [{}], "mesh.oneshot": [{}]},
                   jobs={"auto": [{"broadcast/4096": auto}], "ring": [{"broadcast/4096": ring}],
                         "mesh.oneshot": [{"broadcast/4096": oneshot}]})
        files.append(tmp_path / f"run{i}.json")
        files[-1].write_text(json.dumps(doc))
    assert autocheck.main(["--load", str(files[0]), "--load", str(files[1])]) == 0
    out = capsys.readouterr().out
    assert "4 ranks, one job per label, 2 rounds" in out
    row = next(line for line in out.splitlines() if line.startswith("| broadcast | 4 KiB"))
    # By the median ring (209 us) loses to the one-shot (37 us); auto ran
    # the one-shot, the best by either statistic.
    assert row == "| broadcast | 4 KiB | 37 mesh.oneshot | 42 (40-44) | mesh.oneshot | 1.14 | 1.00 | 1.00 |"
    other = tmp_path / "two.json"
    other.write_text(json.dumps(dict(json.loads(files[0].read_text()), nproc=2)))
    with pytest.raises(SystemExit):
        autocheck.main(["--load", str(files[0]), "--load", str(other)])


def test_abstats_compares_the_stat_asked_for(tmp_path, capsys):
    """benchmarks/abstats.py pools ab.sh's jobs by the figure --stat names:
    here the two variants' medians are equal and their fastest samples 2x
    apart, so the ratio is 1.00 by default and 2.00 with --stat min."""
    abstats = _load_script("abstats")
    header = "collective,size,label,nranks,time_us,time_us_min,wrong,skipped\n"
    for variant, fastest in (("a", 5.0), ("b", 10.0)):
        for job in range(1, 5):
            (tmp_path / f"{variant}.{job}.csv").write_text(
                header + f"all_gather,4096,gohccl,2,{20.0 + job},{fastest * (1 + job / 10)},0,\n"
                + f"all_gather,4096,gloo,2,{900.0 + job},{800.0},0,\n")

    def ratio(*extra):
        abstats.main([str(tmp_path), "--base", "a", *extra])
        row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("all_gather")]
        assert len(row) == 1, row
        fields = row[0].split()
        return fields[fields.index("b:") + 2]

    assert ratio() == "1.00"
    assert ratio("--stat", "min") == "2.00"
    with pytest.raises(SystemExit):
        abstats.main([str(tmp_path), "--stat", "mean"])
