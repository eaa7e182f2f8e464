"""Device registration on a machine with no accelerator runtime usable.

`import gohccl` registers the backend for cpu, cuda and privateuseone; a
fresh process's init_process_group("gohccl") maps all three device types to
it, and CPU collectives work (checked against numpy). A device tensor that
cannot be staged here gets a clear error naming the call, not a crash, and
the group goes on working; so do tensors of one call on two devices."""

import pytest

from harness import attempt, case_results, launch_cached

pytestmark = pytest.mark.timeout(240)
WORLD = 3


def _fake_cuda(shape):
    """A tensor whose device is cuda:0 without any CUDA memory (a
    FakeTensor), so that the shim's device path can be reached here."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(allow_non_fake_inputs=True):
        return torch.empty(shape, device="cuda")


def _sweep(ctx):
    import torch
    import torch.distributed as dist

    import gohccl
    out = {}
    pg = dist.distributed_c10d._get_default_group()
    out["capability"] = list(dist.Backend.backend_capability["gohccl"])
    out["declared"] = list(gohccl.DEVICES)
    out["backends"] = {d: type(pg._get_backend(torch.device(d))).__name__
                       for d in ("cpu", "cuda", "privateuseone")}
    t = torch.arange(5, dtype=torch.float64) + 10 * ctx.rank
    dist.all_reduce(t)
    out["all_reduce"] = t.tolist()
    backend = pg._get_backend(torch.device("cpu"))

    def refuse(fn):
        try:
            fn()
        except Exception as exc:  # noqa: BLE001
            return f"{type(exc).__name__}: {exc}"
        return None

    out["meta"] = attempt(refuse, lambda: backend.allreduce([torch.empty(4, device="meta")]).wait())
    out["cuda"] = attempt(refuse, lambda: backend.allreduce([_fake_cuda((4,))]).wait())
    out["mixed"] = attempt(refuse, lambda: backend.allgather(
        [[torch.empty(4) for _ in range(ctx.world_size)]], [_fake_cuda((4,))]).wait())
    t = torch.full((3,), float(ctx.rank + 1))
    dist.all_reduce(t)
    out["after"] = t.tolist()
    return out


def results(backend):
    if backend != "gohccl":
        pytest.skip("gohccl's registration")
    return launch_cached("devices", _sweep, WORLD, backend, timeout=180)


def test_registered_for_three_device_types(backend):
    for r, o in enumerate(results(backend)):
        assert o["declared"] == ["cpu", "cuda", "privateuseone"]
        assert o["capability"] == o["declared"], f"rank {r}: torch's capability map {o['capability']}"
        assert set(o["backends"].values()) == {"ProcessGroupGoHCCL"}, f"rank {r}: {o['backends']}"


def test_cpu_all_reduce_after_registration(backend):
    import numpy as np
    res = results(backend)
    want = sum(np.arange(5, dtype=np.float64) + 10 * r for r in range(WORLD)).tolist()
    for r, o in enumerate(res):
        assert o["all_reduce"] == want, f"rank {r}: {o['all_reduce']} != {want}"
        assert o["after"] == [float(sum(range(1, WORLD + 1)))] * 3


@pytest.mark.parametrize("case,words", [
    ("meta", ("device meta", "cpu, cuda and privateuseone")),
    ("cuda", ("cuda:0", "current stream")),
    ("mixed", ("one device",)),
])
def test_unusable_device_tensor_is_a_clear_error(backend, case, words):
    for r, msg in enumerate(case_results(results(backend), case, case)):
        assert msg, f"rank {r}: {case} tensor was not refused"
        assert "gohccl" in msg and all(w in msg for w in words), f"rank {r}: unclear: {msg}"
