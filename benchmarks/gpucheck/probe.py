#!/usr/bin/env python3
"""probe: one small case of the torch backend on CUDA, step by step, to find
where a process dies (run.sh runs it when torch_check fails, under segv.so):

    torchrun --nproc-per-node 2 benchmarks/gpucheck/probe.py --case cuda4

Cases: cpu (a host all_reduce), cuda4 (4 floats on the current stream),
cuda0 (an empty tensor), side (4 floats on a side stream), async (async_op
and wait), bcast (broadcast of 4 floats)."""

import argparse
import faulthandler
import os
import sys

import torch
import torch.distributed as dist


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True)
    args = ap.parse_args()
    faulthandler.enable()
    rank = int(os.environ["RANK"])

    def say(what):
        print(f"probe {args.case} rank {rank}: {what}", flush=True)

    import gohccl  # noqa: F401
    dev = torch.device("cuda", 0) if args.case != "cpu" else torch.device("cpu")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group("gohccl")
    say("init done")
    n = 0 if args.case == "cuda0" else 4
    t = torch.full((n,), float(rank + 1), device=dev)
    if dev.type == "cuda":
        torch.cuda.synchronize()
        say(f"tensor at {t.data_ptr():#x}, current stream {torch.cuda.current_stream().cuda_stream:#x}")
    if args.case == "side":
        s = torch.cuda.Stream()
        say(f"side stream {s.cuda_stream:#x}")
        with torch.cuda.stream(s):
            dist.all_reduce(t)
        s.synchronize()
    elif args.case == "async":
        w = dist.all_reduce(t, async_op=True)
        say("issued")
        w.wait()
    elif args.case == "bcast":
        dist.broadcast(t, src=0)
    else:
        dist.all_reduce(t)
    say(f"collective returned: {t.tolist()}")
    dist.destroy_process_group()
    say("destroyed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
