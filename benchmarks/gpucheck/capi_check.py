#!/usr/bin/env python3
"""capi_check: gohccl's device staging on a real GPU through the C ABI.

Run on a machine with a CUDA GPU, after `make build` (benchmarks/gpucheck/run.sh
runs it with the rest of the GPU check):

    .venv/bin/python benchmarks/gpucheck/capi_check.py            # 2 processes on GPU 0 (or GPUs 0, 1)
    .venv/bin/python benchmarks/gpucheck/capi_check.py --mib 256  # a larger timed all-reduce

Without a GPU it runs its C ABI and timing parts against the C test double of
libcudart (built by `make capi-test`), which is how it was checked before any
GPU was at hand:

    .venv/bin/python benchmarks/gpucheck/capi_check.py --fake-cuda build/cmake/doubles/libcudart.so.12

What it does, in 2 spawned processes (rank r on GPU r % device_count):

 A. The C ABI (gohccl_run, libgohccl loaded with ctypes, no torch backend): every
    operation on CUDA device memory (all-reduce, broadcast, reduce, allgather,
    reduce-scatter, gather, scatter, all-to-all-v, send/recv, barrier), each
    against a reference computed with numpy from the same inputs. The inputs
    are written on the current stream and the call is queued behind them
    without a synchronize, so it also checks that a call sees the work queued
    on its stream before it.
 B. The torch backend, when it takes CUDA tensors (gohccl registered for
    "cuda"): every primitive on CUDA tensors against references, then DDP on
    CUDA over gohccl against DDP over NCCL (2 GPUs; NCCL refuses two ranks on
    one GPU) or Gloo (1 GPU): the same parameters after a few steps. Until
    the shim passes CUDA tensors this part prints SKIPPED.
 C. The overlap: a --mib MiB float32 all-reduce, timed as
      staged   gohccl_run on device memory (the pipeline)
      host     the host all-reduce of the same bytes in pinned memory
      copies   the copies alone: device to pinned host and back, on the stream
    and prints staged against max(copies, host) and copies + host. The
    pipeline should be near the max, well under the sum once the message
    spans several chunks (GOHCCL_BUFFSIZE, default 8M: 2.67 MiB per chunk).

Exit status 0 when every check passed. Paste the whole output into the issue.
"""

import argparse
import ctypes
import os
import sys
import time
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# gohccl.h, stable values
MEMORY_HOST, MEMORY_CUDA = 0, 1
(ALLREDUCE, BROADCAST, REDUCE, ALLGATHER, REDUCE_SCATTER, GATHER, SCATTER, ALLTOALLV, BARRIER, SEND,
 RECV) = range(11)
FLOAT32, INT32 = 0, 7
SUM, MAX = 0, 3
ANY_SOURCE = -1
H2D, D2H = 1, 2


class Call(ctypes.Structure):
    """gohccl_call (capi/include/gohccl.h)."""
    _fields_ = [("kind", ctypes.c_int), ("memory", ctypes.c_int), ("device", ctypes.c_int),
                ("stream", ctypes.c_void_p), ("sendbuf", ctypes.c_void_p), ("recvbuf", ctypes.c_void_p),
                ("count", ctypes.c_uint64), ("dtype", ctypes.c_int), ("op", ctypes.c_int), ("root", ctypes.c_int),
                ("peer", ctypes.c_int), ("tag", ctypes.c_int64), ("send_counts", ctypes.c_void_p),
                ("send_offsets", ctypes.c_void_p), ("recv_counts", ctypes.c_void_p),
                ("recv_offsets", ctypes.c_void_p), ("timeout_ms", ctypes.c_int64)]


ERR = ctypes.c_char_p
SET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t,
                       ctypes.c_void_p, ctypes.c_size_t)
GET = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64,
                       ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t), ctypes.c_void_p,
                       ctypes.c_size_t)
ADD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int64,
                       ctypes.POINTER(ctypes.c_int64), ctypes.c_void_p, ctypes.c_size_t)


class StoreOps(ctypes.Structure):
    _fields_ = [("set", SET), ("get", GET), ("add", ADD)]


class Checks:
    def __init__(self, rank):
        self.rank, self.passed, self.failed = rank, 0, 0

    def check(self, ok, what):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            print(f"rank {self.rank}: FAIL: {what}", flush=True)


def libgohccl():
    """The library at LIBGOHCCL, else the one `make build` put in the tree."""
    return ctypes.CDLL(os.environ.get("LIBGOHCCL") or os.path.join(ROOT, "python", "gohccl", "lib", "libgohccl.so"))


class Comm:
    """A gohccl communicator through the C ABI, rendezvousing on a torch TCPStore."""

    def __init__(self, lib, store, rank, size, prefix):
        self.lib, self.rank, self.size = lib, rank, size
        libc = ctypes.CDLL(None)
        libc.malloc.restype = ctypes.c_void_p
        libc.malloc.argtypes = [ctypes.c_size_t]

        def fail(err, n, msg):
            b = msg.encode()[: max(n - 1, 0)] + b"\0"
            if err and n:
                ctypes.memmove(err, b, len(b))
            return 1

        def s_set(_ctx, key, value, n, err, errn):
            try:
                store.set(prefix + key.decode(), ctypes.string_at(value, n) if n else b"")
                return 0
            except Exception as e:  # noqa: BLE001 - any store failure goes back as text
                return fail(err, errn, str(e))

        def s_get(_ctx, key, timeout_ms, value, n, err, errn):
            try:
                k = prefix + key.decode()
                store.wait([k])
                v = store.get(k)
                p = libc.malloc(max(len(v), 1))
                ctypes.memmove(p, v, len(v))
                value[0], n[0] = p, len(v)
                return 0
            except Exception as e:  # noqa: BLE001
                return fail(err, errn, str(e))

        def s_add(_ctx, key, delta, out, err, errn):
            try:
                out[0] = store.add(prefix + key.decode(), delta)
                return 0
            except Exception as e:  # noqa: BLE001
                return fail(err, errn, str(e))

        self.ops = StoreOps(SET(s_set), GET(s_get), ADD(s_add))  # kept alive with the Comm
        lib.gohccl_comm_create.argtypes = [ctypes.POINTER(StoreOps), ctypes.c_void_p, ctypes.c_int, ctypes.c_int,
                                           ctypes.c_int64, ctypes.POINTER(ctypes.c_uint64), ctypes.c_char_p,
                                           ctypes.c_size_t]
        lib.gohccl_run.argtypes = [ctypes.c_uint64, ctypes.POINTER(Call), ctypes.c_char_p, ctypes.c_size_t]
        lib.gohccl_comm_destroy.argtypes = [ctypes.c_uint64]
        h, err = ctypes.c_uint64(), ctypes.create_string_buffer(4096)
        st = lib.gohccl_comm_create(ctypes.byref(self.ops), None, rank, size, 120000, ctypes.byref(h), err, 4096)
        if st != 0:
            raise RuntimeError(f"gohccl_comm_create: {st}: {err.value.decode()}")
        self.handle = h.value

    def run(self, call):
        err = ctypes.create_string_buffer(4096)
        st = self.lib.gohccl_run(self.handle, ctypes.byref(call), err, 4096)
        return st, err.value.decode()

    def destroy(self):
        self.lib.gohccl_comm_destroy(self.handle)


class TorchCUDA:
    """Device memory and streams from torch on a real GPU."""

    name = "cuda (torch)"

    def __init__(self, rank):
        import torch
        self.torch = torch
        self.device = rank % torch.cuda.device_count()
        torch.cuda.set_device(self.device)
        self.keep = {}

    def stream(self):
        return self.torch.cuda.current_stream().cuda_stream

    def alloc(self, nbytes):
        t = self.torch.zeros(max(nbytes, 1), dtype=self.torch.uint8, device="cuda")
        self.keep[t.data_ptr()] = t
        return t.data_ptr()

    def write(self, ptr, arr):
        # Queued on the current stream; the gohccl call that follows must see it.
        src = self.torch.from_numpy(np.ascontiguousarray(arr).view(np.uint8).copy()).pin_memory()
        self.keep[ptr][: src.numel()].copy_(src, non_blocking=True)
        self.keep[(ptr, "src")] = src

    def read(self, ptr, n, dtype):
        nbytes = n * np.dtype(dtype).itemsize
        return self.keep[ptr][:nbytes].cpu().numpy().view(dtype).copy()

    def free_all(self):
        self.torch.cuda.synchronize()
        self.keep.clear()

    def pinned(self, nbytes):
        t = self.torch.empty(nbytes, dtype=self.torch.uint8).pin_memory()
        self.keep[t.data_ptr()] = t
        return t.data_ptr()

    def copies(self, dev, host, nbytes):
        d, h = self.keep[dev][:nbytes], self.keep[host][:nbytes]
        h.copy_(d, non_blocking=True)
        d.copy_(h, non_blocking=True)
        self.torch.cuda.current_stream().synchronize()


class FakeCUDA:
    """Device memory and streams from the C double of libcudart (no GPU)."""

    name = "cuda (the test double)"

    def __init__(self, rank, path):
        self.lib = ctypes.CDLL(path)
        self.device = rank
        for f in ("cudaMalloc", "cudaHostAlloc"):
            getattr(self.lib, f).argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t] + (
                [ctypes.c_uint] if f == "cudaHostAlloc" else [])
        self.lib.cudaMemcpyAsync.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                             ctypes.c_void_p]
        self.lib.cudaMemcpy.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        self.lib.cudaStreamSynchronize.argtypes = [ctypes.c_void_p]
        self.lib.cudaFree.argtypes = [ctypes.c_void_p]
        self.lib.cudaFreeHost.argtypes = [ctypes.c_void_p]
        assert self.lib.cudaSetDevice(rank) == 0
        s = ctypes.c_void_p()
        assert self.lib.cudaStreamCreate(ctypes.byref(s)) == 0
        self.s = s.value
        self.ptrs, self.hosts = [], []

    def stream(self):
        return self.s

    def alloc(self, nbytes):
        p = ctypes.c_void_p()
        assert self.lib.cudaMalloc(ctypes.byref(p), max(nbytes, 1)) == 0
        self.ptrs.append(p.value)
        self.write(p.value, np.zeros(max(nbytes, 1), np.uint8))
        return p.value

    def write(self, ptr, arr):
        b = np.ascontiguousarray(arr).view(np.uint8)
        if b.size:
            assert self.lib.cudaMemcpy(ptr, b.ctypes.data, b.size, H2D) == 0

    def read(self, ptr, n, dtype):
        out = np.zeros(n, dtype)
        if out.nbytes:
            assert self.lib.cudaMemcpy(out.ctypes.data, ptr, out.nbytes, D2H) == 0
        return out

    def free_all(self):
        for p in self.ptrs:
            self.lib.cudaFree(p)
        for p in self.hosts:
            self.lib.cudaFreeHost(p)
        self.ptrs, self.hosts = [], []

    def pinned(self, nbytes):
        p = ctypes.c_void_p()
        assert self.lib.cudaHostAlloc(ctypes.byref(p), nbytes, 0) == 0
        self.hosts.append(p.value)
        return p.value

    def copies(self, dev, host, nbytes):
        assert self.lib.cudaMemcpyAsync(host, dev, nbytes, D2H, self.s) == 0
        assert self.lib.cudaMemcpyAsync(dev, host, nbytes, H2D, self.s) == 0
        assert self.lib.cudaStreamSynchronize(self.s) == 0


def values(rank, n, salt):
    """Rank's inputs: small integers, so float32 sums are exact in any order."""
    return ((rank * 7 + np.arange(n, dtype=np.int64) * 3 + salt) % 19 - 9).astype(np.float32)


def c_ABI_checks(ck, comm, dev, world):
    """Part A: every operation on device memory through gohccl_run."""
    me, n = comm.rank, world
    f4 = 4

    def call(kind, **kw):
        c = Call(kind=kind, memory=MEMORY_CUDA, device=dev.device, stream=dev.stream(), dtype=FLOAT32, op=SUM,
                 timeout_ms=120000)
        for k, v in kw.items():
            setattr(c, k, v)
        return c

    def run(c, what):
        st, msg = comm.run(c)
        ck.check(st == 0, f"{what}: status {st}: {msg}")
        return st == 0

    for count in (0, 1, 1001, 3 << 20):  # the last crosses several 2.67 MiB chunks
        x = values(me, count, 1)
        buf = dev.alloc(count * f4)
        dev.write(buf, x)
        if run(call(ALLREDUCE, recvbuf=buf, count=count), f"allreduce {count}"):
            want = sum(values(p, count, 1) for p in range(n))
            ck.check(np.array_equal(dev.read(buf, count, np.float32), want), f"allreduce {count}: wrong result")

        root = n - 1
        dev.write(buf, values(me, count, 2))
        if run(call(BROADCAST, recvbuf=buf, count=count, root=root), f"broadcast {count}"):
            ck.check(np.array_equal(dev.read(buf, count, np.float32), values(root, count, 2)),
                     f"broadcast {count}: wrong result")

        dev.write(buf, values(me, count, 3))
        if run(call(REDUCE, recvbuf=buf, count=count, root=0, op=MAX), f"reduce {count}"):
            want = np.max([values(p, count, 3) for p in range(n)], axis=0) if me == 0 and count else values(me, count, 3)
            ck.check(np.array_equal(dev.read(buf, count, np.float32), want), f"reduce {count}: wrong result")

        out = dev.alloc(n * count * f4)
        dev.write(buf, values(me, count, 4))
        if run(call(ALLGATHER, sendbuf=buf, recvbuf=out, count=count), f"allgather {count}"):
            want = np.concatenate([values(p, count, 4) for p in range(n)])
            ck.check(np.array_equal(dev.read(out, n * count, np.float32), want), f"allgather {count}: wrong result")

        big = dev.alloc(n * count * f4)
        dev.write(big, values(me, n * count, 5))
        if run(call(REDUCE_SCATTER, sendbuf=big, recvbuf=buf, count=count), f"reduce_scatter {count}"):
            want = sum(values(p, n * count, 5) for p in range(n))[me * count:(me + 1) * count]
            ck.check(np.array_equal(dev.read(buf, count, np.float32), want), f"reduce_scatter {count}: wrong result")

        dev.write(buf, values(me, count, 6))
        if run(call(GATHER, sendbuf=buf, recvbuf=out if me == 0 else None, count=count, root=0), f"gather {count}"):
            if me == 0:
                want = np.concatenate([values(p, count, 6) for p in range(n)])
                ck.check(np.array_equal(dev.read(out, n * count, np.float32), want), f"gather {count}: wrong result")

        root = n - 1
        if me == root:
            dev.write(big, values(root, n * count, 7))
        if run(call(SCATTER, sendbuf=big if me == root else None, recvbuf=buf, count=count, root=root),
               f"scatter {count}"):
            want = values(root, n * count, 7)[me * count:(me + 1) * count]
            ck.check(np.array_equal(dev.read(buf, count, np.float32), want), f"scatter {count}: wrong result")

        # all-to-all-v: q sends p count*((q+2p)%3+1)//3 elements, packed
        size = lambda q, p: count * ((q + 2 * p) % 3 + 1) // 3  # noqa: E731
        sc = np.array([size(me, p) for p in range(n)], np.uint64)
        rc = np.array([size(p, me) for p in range(n)], np.uint64)
        so = np.concatenate([[0], np.cumsum(sc)[:-1]]).astype(np.uint64)
        ro = np.concatenate([[0], np.cumsum(rc)[:-1]]).astype(np.uint64)
        a_in, a_out = dev.alloc(int(sc.sum()) * f4), dev.alloc(int(rc.sum()) * f4)
        dev.write(a_in, values(me, int(sc.sum()), 8))
        if run(call(ALLTOALLV, sendbuf=a_in, recvbuf=a_out, send_counts=sc.ctypes.data, send_offsets=so.ctypes.data,
                    recv_counts=rc.ctypes.data, recv_offsets=ro.ctypes.data), f"alltoallv {count}"):
            parts = []
            for q in range(n):
                qs = [size(q, p) for p in range(n)]
                parts.append(values(q, sum(qs), 8)[sum(qs[:me]):sum(qs[:me]) + qs[me]])
            ck.check(np.array_equal(dev.read(a_out, int(rc.sum()), np.float32), np.concatenate(parts)),
                     f"alltoallv {count}: wrong result")

        if n > 1:  # a ring; odd ranks receive from any source first
            dev.write(buf, values(me, count, 9))
            s = call(SEND, sendbuf=buf, count=count, peer=(me + 1) % n, tag=3)
            r = call(RECV, recvbuf=out, count=count, peer=ANY_SOURCE if me % 2 else (me - 1) % n, tag=3)
            ok = (run(s, "send") and run(r, "recv")) if me % 2 == 0 else (run(r, "recv") and run(s, "send"))
            if ok:
                ck.check(r.peer == (me - 1) % n, f"recv's source {r.peer}")
                ck.check(np.array_equal(dev.read(out, count, np.float32), values((me - 1) % n, count, 9)),
                         f"recv {count}: wrong result")
        run(call(BARRIER), "barrier")
        dev.free_all()


def torch_backend_checks(ck, rank, world, store_port):
    """Part B: the torch backend with CUDA tensors, and DDP against NCCL or Gloo."""
    import torch
    import torch.distributed as dist
    import gohccl  # noqa: F401 - registers the backend

    if "cuda" not in dist.Backend.backend_capability.get("gohccl", []):
        if rank == 0:
            print("B. torch backend on CUDA tensors: SKIPPED (gohccl is not registered for cuda yet)", flush=True)
        return
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("gohccl", init_method=f"tcp://127.0.0.1:{store_port + 1}", rank=rank,
                            world_size=world)
    n = world
    for count in (0, 1, 1001, 3 << 20):
        x = lambda r, s, m=1: torch.from_numpy(values(r, count * m, s)).to(dev)  # noqa: E731
        t = x(rank, 1)
        dist.all_reduce(t)
        ck.check(torch.equal(t.cpu(), sum(x(p, 1) for p in range(n)).cpu()), f"torch all_reduce {count}")
        t = x(rank, 2)
        dist.broadcast(t, src=n - 1)
        ck.check(torch.equal(t.cpu(), x(n - 1, 2).cpu()), f"torch broadcast {count}")
        outs = [torch.empty(count, device=dev) for _ in range(n)]
        dist.all_gather(outs, x(rank, 3))
        ck.check(all(torch.equal(outs[p].cpu(), x(p, 3).cpu()) for p in range(n)), f"torch all_gather {count}")
        o = torch.empty(count, device=dev)
        dist.reduce_scatter_tensor(o, x(rank, 4, n))
        want = sum(x(p, 4, n) for p in range(n))[rank * count:(rank + 1) * count]
        ck.check(torch.equal(o.cpu(), want.cpu()), f"torch reduce_scatter {count}")
        o = torch.empty(n * count, device=dev)
        dist.all_to_all_single(o, x(rank, 5, n))
        want = torch.cat([x(p, 5, n)[rank * count:(rank + 1) * count] for p in range(n)])
        ck.check(torch.equal(o.cpu(), want.cpu()), f"torch all_to_all_single {count}")
        t = x(rank, 6)
        dist.reduce(t, dst=0, op=dist.ReduceOp.MAX)
        if rank == 0 and count:
            ck.check(torch.equal(t.cpu(), torch.stack([x(p, 6) for p in range(n)]).max(0).values.cpu()),
                     f"torch reduce {count}")
        g = [torch.empty(count, device=dev) for _ in range(n)] if rank == 0 else None
        dist.gather(x(rank, 7), g, dst=0)
        if rank == 0:
            ck.check(all(torch.equal(g[p].cpu(), x(p, 7).cpu()) for p in range(n)), f"torch gather {count}")
        o = torch.empty(count, device=dev)
        dist.scatter(o, [x(n - 1, 8, n)[p * count:(p + 1) * count] for p in range(n)] if rank == n - 1 else None,
                     src=n - 1)
        ck.check(torch.equal(o.cpu(), x(n - 1, 8, n)[rank * count:(rank + 1) * count].cpu()), f"torch scatter {count}")
        if n > 1:
            t = x(rank, 9)
            o = torch.empty(count, device=dev)
            reqs = [dist.isend(t, (rank + 1) % n), dist.irecv(o, (rank - 1) % n)]
            for q in reqs:
                q.wait()
            ck.check(torch.equal(o.cpu(), x((rank - 1) % n, 9).cpu()), f"torch send/recv {count}")
        dist.barrier()

    ref = "nccl" if torch.cuda.device_count() >= 2 else "gloo"
    ref_group = dist.new_group(backend=ref)

    def train(group):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).to(dev)
        ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index], process_group=group,
                                                        bucket_cap_mb=1)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(100 + rank)
        for _ in range(5):
            xb, yb = torch.randn(32, 64, generator=g).to(dev), torch.randn(32, 8, generator=g).to(dev)
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp(xb), yb).backward()
            opt.step()
        return [p.detach().cpu() for p in model.parameters()]

    mine, theirs = train(dist.group.WORLD), train(ref_group)
    worst = max((a - b).abs().max().item() for a, b in zip(mine, theirs))
    ck.check(worst <= 1e-5, f"DDP on CUDA: gohccl against {ref}: largest parameter difference {worst:g}")
    if rank == 0:
        print(f"B. DDP on CUDA, 5 steps: gohccl against {ref}: largest parameter difference {worst:g}", flush=True)
    dist.destroy_process_group()


def timing(ck, comm, dev, mib, iters):
    """Part C: the pipelined all-reduce against its copies and its host collective."""
    count = mib << 18
    nbytes = count * 4
    buf, host = dev.alloc(nbytes), dev.pinned(nbytes)

    def clock(f):
        f()  # warm-up
        t = []
        for _ in range(iters):
            t0 = time.perf_counter()
            f()
            t.append(time.perf_counter() - t0)
        return float(np.median(t)) * 1e3

    def staged():
        st, msg = comm.run(Call(kind=ALLREDUCE, memory=MEMORY_CUDA, device=dev.device, stream=dev.stream(),
                                recvbuf=buf, count=count, dtype=FLOAT32, op=SUM, timeout_ms=120000))
        ck.check(st == 0, f"timed staged allreduce: {st}: {msg}")

    def host_only():
        st, msg = comm.run(Call(kind=ALLREDUCE, memory=MEMORY_HOST, recvbuf=host, count=count, dtype=FLOAT32, op=SUM,
                                timeout_ms=120000))
        ck.check(st == 0, f"timed host allreduce: {st}: {msg}")

    t_staged = clock(staged)
    t_host = clock(host_only)
    t_copies = clock(lambda: dev.copies(buf, host, nbytes))
    dev.free_all()
    return t_staged, t_host, t_copies


def worker(rank, world, args, port):
    import torch.distributed as dist

    ck = Checks(rank)
    comm = None
    try:
        store = dist.TCPStore("127.0.0.1", port, world, rank == 0, wait_for_workers=True)
        dev = FakeCUDA(rank, args.fake_cuda) if args.fake_cuda else TorchCUDA(rank)
        lib = libgohccl()
        comm = Comm(lib, store, rank, world, "capi_check/")
        if rank == 0:
            print(f"device memory from {dev.name}; {world} processes", flush=True)
        c_ABI_checks(ck, comm, dev, world)
        if rank == 0:
            print(f"A. C ABI, every operation on device memory: {ck.failed} failed on rank 0", flush=True)
        ts, th, tc = timing(ck, comm, dev, args.mib, args.iters)
        if rank == 0:
            print(f"C. {args.mib} MiB float32 all-reduce, median of {args.iters}, rank 0:\n"
                  f"   staged {ts:9.2f} ms\n   host   {th:9.2f} ms (collective alone)\n"
                  f"   copies {tc:9.2f} ms (down and up alone)\n"
                  f"   max(copies, host) {max(th, tc):9.2f} ms, copies + host {th + tc:9.2f} ms: "
                  f"staged is {ts / max(th, tc):.2f}x the max, {ts / (th + tc):.2f}x the sum", flush=True)
        comm.destroy()
        comm = None
        if not args.fake_cuda:
            torch_backend_checks(ck, rank, world, port)
    except Exception:  # noqa: BLE001 - report and fail, never hang the other rank silently
        traceback.print_exc()
        ck.failed += 1
        if comm is not None:
            comm.lib.gohccl_comm_abort(ctypes.c_uint64(comm.handle))
    print(f"rank {rank}: {ck.passed} passed, {ck.failed} failed", flush=True)
    sys.exit(1 if ck.failed else 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--mib", type=int, default=64, help="size of the timed all-reduce")
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--fake-cuda", metavar="PATH", help="the libcudart test double, instead of a GPU")
    ap.add_argument("--port", type=int, default=29611)
    args = ap.parse_args()
    if args.fake_cuda:
        args.fake_cuda = os.path.abspath(args.fake_cuda)
        os.environ["GOHCCL_CUDA_LIBRARY"] = args.fake_cuda
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")  # the Go runtime does not survive fork
    procs = [ctx.Process(target=worker, args=(r, args.nproc, args, args.port)) for r in range(args.nproc)]
    for p in procs:
        p.start()
    deadline = time.time() + 600
    for p in procs:
        p.join(max(1, deadline - time.time()))
    bad = [p for p in procs if p.exitcode != 0]
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join()
    print("SUMMARY capi_check:", "FAILED" if bad else "passed", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
