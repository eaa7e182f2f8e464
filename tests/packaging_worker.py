"""One rank of tests/test_packaging.py, started by torchrun in a fresh
interpreter. It never imports gohccl: the backend named in argv[1] must be
found through torch's entry point. It checks an all_reduce and an all_gather
against numpy and writes what it saw to argv[2]/rank<N>.json."""

import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist


def inputs(rank, count):
    return np.random.default_rng(1000 + rank).integers(-50, 50, count).astype(np.float32)


def main():
    backend, out = sys.argv[1], sys.argv[2]
    imported_before = "gohccl" in sys.modules
    dist.init_process_group(backend)
    rank, size = dist.get_rank(), dist.get_world_size()
    cpu_backend = type(dist.group.WORLD._get_backend(torch.device("cpu"))).__name__
    checks = {}
    for count in (0, 1, 7, 1000):
        t = torch.from_numpy(inputs(rank, count).copy())
        dist.all_reduce(t)
        want = sum(inputs(r, count) for r in range(size))
        checks[f"all_reduce/{count}"] = bool(np.array_equal(t.numpy(), want))
        parts = [torch.empty(count) for _ in range(size)]
        dist.all_gather(parts, torch.from_numpy(inputs(rank, count).copy()))
        checks[f"all_gather/{count}"] = all(
            np.array_equal(p.numpy(), inputs(r, count)) for r, p in enumerate(parts))
    dist.destroy_process_group()
    gohccl = sys.modules.get("gohccl")
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump({"imported_before": imported_before, "imported_after": "gohccl" in sys.modules,
                   "cpu_backend": cpu_backend, "size": size, "checks": checks,
                   "gohccl_file": getattr(gohccl, "__file__", None)}, f)


if __name__ == "__main__":
    main()
