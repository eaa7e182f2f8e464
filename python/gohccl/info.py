"""python -m gohccl.info: what a bug report about gohccl needs, in the manner
of `python -m torch.utils.collect_env` and NCCL_DEBUG=INFO.

    python -m gohccl.info                      # this host: versions, CPU, variables, /dev/shm
    torchrun --nproc-per-node 4 -m gohccl.info # also each rank's topology, transports, the algorithm table
    python -m gohccl.info --json               # the same as one JSON object

Exit status 1 when a GOHCCL_* variable is malformed (init would refuse it)
or, under torchrun, when the communicator cannot be created."""

import argparse
import json
import os
import platform
import sys

import torch

import gohccl
from gohccl import _lib

PREFIX = "GOHCCL_"


def shm_facts(path="/dev/shm"):
    """Capacity and free space of the shared-memory file system, in bytes."""
    try:
        st = os.statvfs(path)
    except OSError as e:
        return {"path": path, "error": str(e)}
    return {"path": path, "total": st.f_blocks * st.f_frsize, "free": st.f_bavail * st.f_frsize}


def host_report():
    """Everything that needs no communicator, as a dict."""
    h = _lib.host_info()
    known = {v["name"] for v in h["vars"]}
    unknown = sorted(k for k in os.environ if k.startswith(PREFIX) and k not in known)
    return {
        "gohccl": {"package": gohccl.__version__, "library": h["version"], "abi": h["abi_version"],
                   "go": h["go_version"], "location": os.path.dirname(os.path.abspath(gohccl.__file__))},
        "torch": {"version": torch.__version__, "cuda": torch.version.cuda,
                  "location": os.path.dirname(os.path.abspath(torch.__file__))},
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "os": {"platform": platform.platform(), "machine": platform.machine()},
        "cpu": {"model": h["cpu_model"], "vendor": h["cpu_vendor"], "logical_cpus": h["logical_cpus"],
                "features": h["cpu_features"]},
        "reduce": {"paths": h["reduce_paths"], "chosen": h.get("reduce_path", ""),
                   "error": h.get("reduce_path_error", "")},
        "variables": h["vars"],
        "unknown_variables": [{"name": k, "value": os.environ[k]} for k in unknown],
        "shm": shm_facts(),
    }


def malformed(report):
    return [v for v in report["variables"] if v.get("error")]


def under_launcher():
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def group_report():
    """Under torchrun: joins the group over gohccl, and returns every rank's
    communicator description (on every rank)."""
    import torch.distributed as dist

    dist.init_process_group("gohccl")
    try:
        backend = dist.group.WORLD._get_backend(torch.device("cpu"))
        mine = _lib.comm_info(backend.comm)
        mine["pid"] = os.getpid()
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
        return everyone
    finally:
        dist.destroy_process_group()


def size_text(n):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} B"


def wrap(words, width=96, indent="    "):
    lines, line = [], indent
    for w in words:
        if len(line) + len(w) + 1 > width and line.strip():
            lines.append(line.rstrip())
            line = indent
        line += w + " "
    if line.strip():
        lines.append(line.rstrip())
    return "\n".join(lines)


def render(report):
    g, t = report["gohccl"], report["torch"]
    out = [
        f"gohccl version: {g['package']} (libgohccl {g['library']}, C ABI {g['abi']}, built with {g['go']})",
        f"gohccl location: {g['location']}",
        f"torch version: {t['version']} (CUDA {t['cuda'] or 'none'}) at {t['location']}",
        f"python: {report['python']['version']} ({report['python']['executable']})",
        f"os: {report['os']['platform']}",
        f"cpu: {report['cpu']['model']} ({report['cpu']['vendor']}), {report['cpu']['logical_cpus']} logical CPUs",
        "cpu features:",
        wrap(report["cpu"]["features"]),
    ]
    r = report["reduce"]
    if r["error"]:
        out.append(f"reduce kernels: this CPU runs {', '.join(r['paths'])}; GOHCCL_SIMD refused: {r['error']}")
    else:
        out.append(f"reduce kernels: this CPU runs {', '.join(r['paths'])}; chosen: {r['chosen']}")
    s = report["shm"]
    if "error" in s:
        out.append(f"shared memory {s['path']}: unavailable ({s['error']})")
    else:
        out.append(f"shared memory {s['path']}: {size_text(s['total'])} total, {size_text(s['free'])} free")
    out.append("variables (value, where it came from):")
    for v in report["variables"]:
        line = f"    {v['name']}={v['value'] or '(unset)'}  [{v['source']}]"
        if v.get("error"):
            line += f"  MALFORMED: {v['error']}"
        out.append(line)
    for v in report["unknown_variables"]:
        out.append(f"    {v['name']}={v['value']}  [environment]  UNKNOWN: gohccl reads no such variable")
    if "group_error" in report:
        out.append(f"communicator: not created: {report['group_error']}")
    if report.get("ranks"):
        ranks = report["ranks"]
        first = ranks[0]
        out.append(f"group: {first['Size']} ranks, {first['Topology']}; nodes {first['Nodes']}")
        for rk in ranks:
            links = {}
            for peer, cls in enumerate(rk["Links"]):
                links.setdefault(cls, []).append(peer)
            desc = "; ".join(f"{cls} to {peers}" for cls, peers in links.items())
            out.append(f"    rank {rk['Rank']} pid {rk['pid']} host {rk['Host']}: {desc}; reduce {rk['ReducePath']}, "
                       f"buffer {size_text(rk['BufferBytes'])}, segment {size_text(rk['SegmentBytes'])}")
        out.append(f"algorithm table (GOHCCL_ALGO={first['Algo'] or 'auto'}; each line: candidates at their "
                   f"best segment with the price, -> the choice):")
        out.extend("    " + line for line in first["Table"])
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m gohccl.info", description=__doc__.split("\n")[0])
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the text report")
    a = ap.parse_args(argv)
    report = host_report()
    bad = malformed(report)
    rank = 0
    if under_launcher():
        rank = int(os.environ["RANK"])
        if bad:
            report["group_error"] = "malformed variables: " + ", ".join(v["name"] for v in bad)
        else:
            try:
                report["ranks"] = group_report()
            except Exception as e:  # the report says why instead of a traceback
                report["group_error"] = f"{type(e).__name__}: {e}"
    if rank == 0 or "group_error" in report:
        text = json.dumps(report, indent=1) if a.json else render(report)
        if rank != 0:
            text = f"[rank {rank}] " + text
        print(text, flush=True)
    return 1 if bad or "group_error" in report else 0


if __name__ == "__main__":
    sys.exit(main())
