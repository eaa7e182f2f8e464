"""DistributedDataParallel over the backend: a few SGD steps of a small MLP,
with one bucket, many small buckets, and find_unused_parameters=True on a
model with a never-used branch and a branch only even ranks use.

Every rank must end with bitwise-identical parameters; they must match a
single-process reference that averages the ranks' gradients by hand, and the
same training over a gloo group in the same processes (parity)."""

import numpy as np
import pytest

from harness import (
    assert_same_on_all_ranks, attempt, case_results, gen_values, launch_cached, pack, values_of,
)

SEED = 4242
STEPS = 4
LR = 0.05
BATCH = 6
DDP_WORLDS = [2, 3]
CONFIGS = ["plain", "small_buckets", "unused", "allreduce_hook", "fp16_hook"]
# fp16_compress_hook sums float16 gradients: compare at float16's precision.
TOLERANCE = {"fp16_hook": dict(rtol=1e-3, atol=2e-4)}
DEFAULT_TOLERANCE = dict(rtol=1e-5, atol=1e-6)
TIMEOUT = 240

pytestmark = pytest.mark.timeout(TIMEOUT + 60)


def make_model(config, seed):
    import torch
    from torch import nn

    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(8, 16)
            self.fc2 = nn.Linear(16, 4)
            self.side = nn.Linear(16, 4)     # used by even ranks only
            self.unused = nn.Linear(16, 4)   # never used

        def forward(self, x, use_side):
            h = torch.relu(self.fc1(x))
            out = self.fc2(h)
            if use_side:
                out = out + self.side(h)
            return out

    torch.manual_seed(seed)
    if config == "unused":
        return Branchy()
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def batch(rank, step):
    import torch
    x = torch.from_numpy(gen_values(SEED, rank, "float32", (BATCH, 8), "any", step))
    y = torch.from_numpy(gen_values(SEED, rank, "float32", (BATCH, 4), "any", 1000 + step))
    return x, y


def uses_side(rank):
    return rank % 2 == 0


def forward(model, config, x, rank):
    return model(x, uses_side(rank)) if config == "unused" else model(x)


def _train(ctx, config, pg):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    # A different initialisation on every rank: DDP must broadcast rank 0's.
    model = make_model(config, 100 + ctx.rank)
    kwargs = {"process_group": pg}
    if config == "small_buckets":
        kwargs.update(bucket_cap_mb=0.0005, gradient_as_bucket_view=True)
    if config == "unused":
        kwargs.update(find_unused_parameters=True)
    ddp = DDP(model, **kwargs)
    if config.endswith("_hook"):
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        hook = default_hooks.allreduce_hook if config == "allreduce_hook" else default_hooks.fp16_compress_hook
        ddp.register_comm_hook(state=pg, hook=hook)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    losses = []
    for step in range(STEPS):
        x, y = batch(ctx.rank, step)
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(forward(ddp, config, x, ctx.rank), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"params": {n: pack(p.detach()) for n, p in model.named_parameters()},
            "losses": losses}


def ddp_sweep(ctx):
    import torch.distributed as dist
    out = {}
    for config in CONFIGS:
        out[f"{config}/main"] = attempt(_train, ctx, config, None)
    gloo = dist.new_group(backend="gloo")
    for config in CONFIGS:
        out[f"{config}/gloo"] = attempt(_train, ctx, config, gloo)
    return out


def results(backend, world):
    return launch_cached("ddp", ddp_sweep, world, backend, timeout=TIMEOUT)


def reference(config, world):
    """Single process: average the ranks' gradients by hand, then SGD."""
    import torch
    model = make_model(config, 100)
    for step in range(STEPS):
        grads = {n: torch.zeros_like(p) for n, p in model.named_parameters()}
        for rank in range(world):
            model.zero_grad()
            x, y = batch(rank, step)
            torch.nn.functional.mse_loss(forward(model, config, x, rank), y).backward()
            for n, p in model.named_parameters():
                if p.grad is not None:
                    grads[n] += p.grad
        with torch.no_grad():
            for n, p in model.named_parameters():
                p -= LR * grads[n] / world
    return {n: p.detach().numpy().astype(np.float64) for n, p in model.named_parameters()}


@pytest.mark.parametrize("world", DDP_WORLDS, ids=lambda w: f"w{w}")
@pytest.mark.parametrize("config", CONFIGS)
def test_ddp_training(backend, world, config):
    res = results(backend, world)
    main = case_results(res, f"{config}/main", f"DDP {config} on {backend}")
    parity = case_results(res, f"{config}/gloo", f"DDP {config} on a gloo group")
    ref = reference(config, world)
    for label, runs in ((backend, main), ("gloo group", parity)):
        names = list(runs[0]["params"])
        assert sorted(names) == sorted(ref), f"{label}: parameters {names}"
        for n in names:
            what = f"DDP {config} world {world} on {label}: parameter {n}"
            assert_same_on_all_ranks([run["params"][n] for run in runs], what)
            got = values_of(runs[0]["params"][n])
            np.testing.assert_allclose(got, ref[n], **TOLERANCE.get(config, DEFAULT_TOLERANCE),
                                       err_msg=f"{what} vs the single-process reference")
    for n in main[0]["params"]:
        np.testing.assert_allclose(values_of(main[0]["params"][n]), values_of(parity[0]["params"][n]),
                                   **TOLERANCE.get(config, DEFAULT_TOLERANCE),
                                   err_msg=f"DDP {config} world {world}: {backend} vs gloo parameter {n}")
    if config == "unused":
        init = make_model(config, 100)
        for n, p in init.named_parameters():
            if n.startswith("unused."):
                got = values_of(main[0]["params"][n])
                assert np.array_equal(got, p.detach().numpy().astype(np.float64)), (
                    f"never-used parameter {n} changed during training")
