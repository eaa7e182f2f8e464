"""gohccl: collective communication in Go, served as the torch.distributed
backend "gohccl".

    import torch.distributed as dist
    import gohccl                      # registers the backend
    dist.init_process_group("gohccl")

Launch with torchrun or another spawn-based launcher: the Go runtime inside
libgohccl does not survive fork(), so never fork a process after importing
gohccl (multiprocessing must use the "spawn" start method).
"""

import torch.distributed as _dist

from gohccl import _C

__version__ = _C.version()

__all__ = ["__version__", "DEVICES", "dump_trace"]

# DEVICES: the device types the backend serves. Host tensors go to libgohccl
# as they are; cuda and privateuseone tensors (torch_npu renames PrivateUse1
# to "npu") are staged by libgohccl through pinned host memory on the
# caller's current stream (docs/devices.md). "npu" itself is not listed: it is
# not a device type until torch_npu is loaded, and init_process_group would
# refuse it.
DEVICES = ("cpu", "cuda", "privateuseone")


def dump_trace(dir=None):
    """Write the flight record of every gohccl communicator of this process
    into dir (default: GOHCCL_TRACE_DIR) and return the paths; see
    gohccl.trace.dump_trace and docs/trace.md."""
    from gohccl import trace  # not at import: `python -m gohccl.trace` runs it as __main__
    return trace.dump_trace(dir)


def _register_backend():
    """Registers "gohccl" with torch.distributed. It runs at import, and torch
    calls it through the entry point of group `torch.distributed.backends`
    (pyproject.toml) when init_process_group meets the name "gohccl" before
    anyone imported gohccl."""
    # The creator receives (store, group rank, group size, timeout): the form
    # without extended_api. Registering again, as a re-import or the entry
    # point does, just replaces the same entry.
    _dist.Backend.register_backend("gohccl", _C.create_backend, devices=list(DEVICES))


_register_backend()
