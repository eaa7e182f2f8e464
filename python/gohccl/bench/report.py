"""gohccl.bench.report: what the bench shows and writes: the Row of one label
in one case, the nccl-tests style table on stdout, the progress bar on
stderr, and the --json, --csv and --plot files."""

from __future__ import annotations

import csv
import dataclasses
import json
import sys
import time
from typing import TYPE_CHECKING

from .defs import human_bytes

if TYPE_CHECKING:
    from .timing import Label

def format_time_us(us: float) -> str:
    if us < 1e4:
        return f"{us:.2f}"
    if us < 1e6:
        return f"{us:.1f}"
    return f"{us:.0f}"


@dataclasses.dataclass
class Row:
    collective: str
    size: int
    count: int
    dtype: str
    type: str
    redop: str
    root: int
    label: str
    backend: str
    algo: str | None
    time_us: float | None
    time_us_median: float | None
    time_us_mean: float | None
    time_us_min: float | None
    algbw: float | None
    busbw: float | None
    wrong: int | None
    speedup_vs_gloo: float | None
    iters: int
    warmup: int
    block: int
    nranks: int
    skipped: str | None = None


def table_header(labels: list[Label], has_gloo: bool) -> list[str]:
    left_names = ("size", "count", "type", "redop", "root")
    left_units = ("(B)", "(elements)", "", "", "")
    left_w = (12, 12, 8, 6, 6)
    top = "#" + " " * (sum(left_w) + 2 * len(left_w) - 1)
    names = "#" + "  ".join(f"{n:>{w}}" for n, w in zip(left_names, left_w))[1:]
    units = "#" + "  ".join(f"{n:>{w}}" for n, w in zip(left_units, left_w))[1:]
    for label in labels:
        cols = [("time", "(us)", 10), ("algbw", "(GB/s)", 7), ("busbw", "(GB/s)", 7),
                ("#wrong", "", 6)]
        if has_gloo and label.backend != "gloo":
            cols.append(("speedup", "vs gloo", 7))
        width = sum(w + 2 for _, _, w in cols)
        top += f"{label.name:^{width}}"
        names += "".join(f"  {n:>{w}}" for n, _, w in cols)
        units += "".join(f"  {u:>{w}}" for _, u, w in cols)
    return [top.rstrip(), names.rstrip(), units.rstrip()]


def table_line(rows: list[Row], labels: list[Label], has_gloo: bool) -> str:
    r0 = rows[0]
    text = (f"{r0.size:>12}  {r0.count:>12}  {r0.type:>8}  {r0.redop:>6}  {r0.root:>6}")
    for label, row in zip(labels, rows):
        if row.skipped is not None:
            cells = ["n/a", "n/a", "n/a", "n/a"]
        else:
            cells = [format_time_us(row.time_us), f"{row.algbw:.2f}", f"{row.busbw:.2f}",
                     "N/A" if row.wrong is None else str(row.wrong)]
        widths = [10, 7, 7, 6]
        if has_gloo and label.backend != "gloo":
            cells.append("n/a" if row.speedup_vs_gloo is None else f"{row.speedup_vs_gloo:.2f}x")
            widths.append(7)
        text += "".join(f"  {c:>{w}}" for c, w in zip(cells, widths))
    return text



class Progress:
    """Progress draws one line on stderr: cases done, the case running, time
    left. Rows printed meanwhile go through line() so the bar never garbles them."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled = total, enabled and total > 0
        self.done, self.desc, self.start = 0, "", time.monotonic()
        self._last, self._shown = 0.0, False

    def case(self, desc: str):
        self.desc = desc
        self.draw(force=True)

    def advance(self):
        self.done += 1
        self.draw(force=True)

    def draw(self, force: bool = False, frac: float = 0.0):
        if not self.enabled:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.2:
            return
        self._last = now
        done = min(self.done + frac, self.total)
        width = 24
        filled = int(width * done / self.total)
        elapsed = now - self.start
        eta = ""
        if done > 0 and done < self.total:
            eta = f" ~{elapsed * (self.total - done) / done:.0f}s left"
        sys.stderr.write(f"\r\033[K[{'#' * filled}{'.' * (width - filled)}] "
                         f"{self.done}/{self.total} {self.desc}{eta}")
        sys.stderr.flush()
        self._shown = True

    def clear(self):
        if self.enabled and self._shown:
            sys.stderr.write("\r\033[K")
            sys.stderr.flush()
            self._shown = False

    def line(self, text: str):
        self.clear()
        print(text, flush=True)
        self.draw(force=True)




ROW_FIELDS = [f.name for f in dataclasses.fields(Row)]


def write_json(path: str, meta: dict, rows: list[Row]):
    doc = dict(meta)
    doc["results"] = [dataclasses.asdict(r) for r in rows]
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")


def write_csv(path: str, rows: list[Row]):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=ROW_FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: ("" if v is None else v) for k, v in dataclasses.asdict(r).items()})


def write_plot(path: str, rows: list[Row], nranks: int):
    """write_plot draws busbw and time against size, log axes, one line per
    label, one pair of panels per (collective, dtype, redop)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter
    groups: dict[tuple, dict[str, list[Row]]] = {}
    for r in rows:
        if r.time_us is None:
            continue
        groups.setdefault((r.collective, r.type, r.redop), {}).setdefault(r.label, []).append(r)
    if not groups:
        raise SystemExit("gohccl.bench: nothing to plot")
    fig, axes = plt.subplots(len(groups), 2, figsize=(11, 4 * len(groups)), squeeze=False)
    for (collective, type_, redop), by_label in zip(groups, groups.values()):
        i = list(groups).index((collective, type_, redop))
        bw_ax, t_ax = axes[i]
        for name, series in by_label.items():
            series = sorted(series, key=lambda r: r.size)
            x = [r.size for r in series]
            bw_ax.plot(x, [max(r.busbw, 1e-6) for r in series], marker="o", ms=3, label=name)
            t_ax.plot(x, [r.time_us for r in series], marker="o", ms=3, label=name)
        what = collective + ("" if redop == "none" else f" {redop}") + f" {type_}, {nranks} ranks"
        bw_ax.set(yscale="log", ylabel="busbw (GB/s)", title=f"bus bandwidth: {what}")
        t_ax.set(yscale="log", ylabel="time (us)", title=f"latency: {what}")
        for ax in (bw_ax, t_ax):
            ax.set_xscale("log", base=2)
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: human_bytes(int(round(v)))))
            ax.set_xlabel("size (bytes)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

