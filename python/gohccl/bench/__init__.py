"""gohccl.bench: an nccl-tests style benchmark of gohccl, with Gloo (and MPI)
measured side by side in the same job.

    torchrun --standalone --nproc-per-node 2 -m gohccl.bench -b 8 -e 32M -f 2
    python -m gohccl.bench --nproc 2 -c all_reduce -b 8 -e 32M -f 2 --check
    mpirun -np 2 python -m gohccl.bench --backends gohccl,gloo,mpi

It prints what nccl-tests prints, one row per message size: size, count,
type, redop, root, then time (us), algbw and busbw (decimal GB/s) and #wrong
for every backend, and each non-Gloo backend's speedup over Gloo. docs/bench.md
says what each column means and how it is measured.

Terms used below:
  label      one column group of the table: a torch.distributed backend
             ("gloo"), gohccl with one GOHCCL_ALGO ("gohccl/ring"), or "mpi".
  case       one (collective, dtype, redop, size): one row of the table.
  sample     the wall time of a block of back-to-back blocking calls of one
             label on one rank, divided by the calls (--block, default 10).
  time       for each label and case: every rank takes the median (or, with
             --stat mean, the mean) of its samples; the time reported is the
             largest of those per-rank values, so the slowest rank sets it.
  size       nccl-tests' S: the larger of a rank's send and receive buffers,
             in bytes. For all_gather that is the gathered output, for
             reduce_scatter the input, for all_to_all the whole send buffer.
  count      the count argument the NCCL API would take: elements per rank
             for all_gather and reduce_scatter, per peer for all_to_all, the
             whole buffer otherwise.

Labels are interleaved within one job, A B A B, one sample (block) of each per
iteration, on the same tensors, so a machine that speeds up or slows down
during the sweep moves every label alike.

Process model. Under torchrun (RANK and WORLD_SIZE set) every process is a
rank. Under mpirun the ranks come from MPI (mpi4py if installed, else the
launcher's environment). Otherwise the command launches itself under torchrun
with --nproc ranks (default 2); --nproc 1 runs one rank in this process. The
launcher only ever starts fresh interpreters (subprocess, exec): the Go
runtime inside gohccl does not survive fork().

Test hook: GOHCCL_BENCH_CORRUPT (read only by the --check path, never by the
timed path) names labels, comma separated, or "*": on every rank whose result
is verified, the first element of such a label's result is altered after the
collective returns and before it is compared, so a test can see that --check
counts it in #wrong. It exists for tests/test_bench.py; it has no other use.

The package, in the order a run goes through it:
  cli      the options and main: launch the ranks, or be one of them
  launch   torchrun/mpirun/--nproc, the World (rank, size, control group)
  timing   the labels and the interleaved, timed sweep
  check    --check: closed-form inputs, locally computed expectations
  report   rows, the table, the progress bar, --json/--csv/--plot
  defs     collectives, dtypes, sizes, layouts and bus factors (pure)
"""

from .check import count_wrong, expected_result, fill_for_check, pattern, verify
from .cli import Options, build_parser, main, parse_args, run_rank
from .defs import (COLLECTIVES, DTYPES, ELEMENT_SIZE, EPS, FLOAT_DTYPES, NCCL_TYPE_NAME, OPS,
                   REDUCING, ROOTED, Layout, bandwidths, bus_factor, human_bytes, layout,
                   parse_size, sweep_sizes)
from .launch import BenchError, World, exit_now, launch_self
from .report import ROW_FIELDS, Row, write_csv, write_json, write_plot
from .timing import (FIRST_WARMUP_BYTES, FIRST_WARMUP_ROUNDS, Buffers, Label, make_buffers,
                     make_labels, measure_row, run_sweep, warmup_rounds)

__all__ = [
    "BenchError", "Buffers", "COLLECTIVES", "DTYPES", "ELEMENT_SIZE", "EPS", "FIRST_WARMUP_BYTES",
    "FIRST_WARMUP_ROUNDS", "FLOAT_DTYPES", "Label", "Layout", "NCCL_TYPE_NAME", "OPS", "Options",
    "REDUCING", "ROOTED", "ROW_FIELDS", "Row", "World", "bandwidths", "build_parser",
    "bus_factor", "count_wrong", "exit_now", "expected_result", "fill_for_check",
    "human_bytes", "launch_self", "layout", "main", "make_buffers", "make_labels",
    "measure_row", "parse_args", "parse_size", "pattern", "run_rank", "run_sweep",
    "sweep_sizes", "verify", "warmup_rounds", "write_csv", "write_json", "write_plot",
]
