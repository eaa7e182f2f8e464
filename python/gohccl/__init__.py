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
from gohccl.trace import dump_trace  # the flight recorder (docs/trace.md)

__version__ = _C.version()

__all__ = ["__version__", "dump_trace"]

# The creator receives (store, group rank, group size, timeout): the form
# without extended_api. Registering again, as a re-import would, just
# replaces the same entry.
_dist.Backend.register_backend("gohccl", _C.create_backend, devices=["cpu"])
