"""python -m gohccl.sim: the simulator, with gohccl-sim's options and output
(goimpl/sim/cli), run inside libgohccl: no Go toolchain or source tree needed.

    python -m gohccl.sim -nodes 4 -per-node 8 -bytes 1G
    python -m gohccl.sim -nodes 1 -per-node 4 -bytes 1M -json
    python -m gohccl.sim -h
"""

import sys

from gohccl import _lib


def main(argv=None):
    """Runs the simulator with argv (default sys.argv[1:]) and returns its
    exit status: 0, or 2 for bad options."""
    rc, out, err = _lib.sim_main(list(sys.argv[1:] if argv is None else argv))
    sys.stdout.write(out)
    sys.stdout.flush()
    sys.stderr.write(err)
    return rc


if __name__ == "__main__":
    sys.exit(main())
