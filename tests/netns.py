"""Emulated hosts on one machine: network namespaces joined by a bridge.

A cluster of N hosts is made of:
  host     a network namespace with one interface (IFNAME, an address in
           the cluster's subnet, loopback up), and a keeper process that
           holds a mount, UTS and PID namespace of the host's own: a private
           tmpfs on /dev/shm, a hostname, an /etc/hosts naming every host,
           and a /proc that shows only the host's processes. Every command
           run on the host enters all four namespaces through nsenter, so
           gohccl's host detection (hostname, boot id, a shared-memory
           probe) sees N separate hosts, and every process of one host sees
           the same /dev/shm.
  switch   a namespace of its own holding the bridge; each host's link is a
           veth pair from the host's IFNAME to a port of the bridge.
  link     that veth pair. With a rate, each end's egress is shaped by a
           token bucket (tc tbf), so both directions carry at most the rate.
           This kernel has no netem: latency cannot be added.
  tag      "hosts-<pid>-<k>": the prefix of every namespace of one cluster,
           unique per run (pid of the process that made it, k its count).
           Another engineer's namespaces never start with "hosts-".

Nothing is left behind: `Cluster.down` (run by the context manager, on
exceptions, Ctrl-C and, in the CLI, SIGTERM) kills every process of every
host and removes every namespace. If the owner is killed outright
(SIGKILL), its keepers die with it (parent-death signal, then unshare's
--kill-child, and the death of a PID namespace's init kills the rest of the
namespace), and the named network namespaces that remain are swept by the
next cluster this module makes, or by `python tests/netns.py clean`.

The same module is a CLI (run as root):
  python tests/netns.py up --hosts 2 [--rate 1gbit] -- CMD...   run CMD on every host
  python tests/netns.py up --hosts 2                            hold the hosts until Ctrl-C
  python tests/netns.py list | clean
In CMD the words {host} {hosts} {addr} {master} {mastername} {hostname} {ifname} are
replaced per host (docs/hosts.md has examples).
"""

from __future__ import annotations

import argparse
import ctypes
import dataclasses
import ipaddress
import itertools
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

# PREFIX starts the name of every namespace this module makes.
PREFIX = "hosts-"
# IFNAME is each host's interface; the name is the same on every host, so one
# GLOO_SOCKET_IFNAME or GOHCCL_SOCKET_IFNAME value serves them all.
IFNAME = "hosts-eth0"
# BRIDGE is the switch's bridge; its ports are PORT.format(index).
BRIDGE = "hosts-br"
PORT = "hosts-p{}"
DEFAULT_SUBNET = "10.233.0.0/24"

_TAG_RE = re.compile(r"^" + re.escape(PREFIX) + r"(\d+)-(\d+)-")
_counter = itertools.count()
_PR_SET_PDEATHSIG = 1


class Unavailable(RuntimeError):
    """Unavailable says why this machine cannot make emulated hosts."""


def unavailable_reason() -> str | None:
    """unavailable_reason returns why hosts cannot be made here, or None.

    It needs root, the ip, unshare and nsenter tools, and a kernel that
    lets it add a network namespace (the probe makes and removes one)."""
    if not sys.platform.startswith("linux"):
        return "emulated hosts need Linux network namespaces"
    if os.geteuid() != 0:
        return "emulated hosts need root (network, mount, UTS and PID namespaces)"
    for tool in ("ip", "unshare", "nsenter", "tc", "mount"):
        if shutil.which(tool) is None:
            return f"emulated hosts need the {tool!r} tool (apt-get install iproute2 util-linux)"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"cannot make a network namespace: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    cmd = ["ip"] + (["-n", ns] if ns else []) + list(args)
    out = subprocess.run(cmd, capture_output=True, text=True)
    if check and out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {out.stderr.strip() or out.returncode}")
    return out


def _netns_names() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _alive(pid: int) -> bool:
    """_alive says whether pid runs (a zombie, killed but not yet reaped,
    does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def sweep_stale() -> list[str]:
    """sweep_stale removes the namespaces of clusters whose owner process is
    gone (an owner killed with SIGKILL cannot clean up) and returns them."""
    removed = []
    for name in _netns_names():
        m = _TAG_RE.match(name)
        if m and not _alive(int(m.group(1))):
            _kill_netns_processes(name)
            _ip("netns", "del", name, check=False)
            removed.append(name)
    return removed


def _kill_netns_processes(name: str):
    """Kill what still runs in a named network namespace (pids from ip)."""
    pids = _ip("netns", "pids", name, check=False).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass


def parse_rate(rate: str) -> int:
    """parse_rate turns a tc rate ("1gbit", "500mbit", "100mbps") into bytes
    per second; tc's units: bit/kbit/mbit/gbit are bits, bps/kbps/... bytes."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([kmgt]?)(bit|bps)\s*", rate.lower())
    if not m:
        raise ValueError(f"rate {rate!r}: expected a number and a tc unit, e.g. 1gbit, 500mbit, 100mbps")
    value = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
    return int(value / 8 if m.group(3) == "bit" else value)


# The keeper is PID 1 of a host's PID namespace. It reaps orphans (the
# launchers start ranks in sessions of their own, which become its children
# when their launcher dies) and otherwise sleeps; it leaves when killed.
_KEEPER = r"""
import os, signal, sys
def reap(*_):
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
signal.signal(signal.SIGCHLD, reap)
signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
print("ready", flush=True)
while True:
    signal.pause()
"""


def _set_parent_death_signal():
    """Runs in the keeper's launcher between fork and exec: if the process
    that made the cluster dies, the keeper is killed with it."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclasses.dataclass
class Host:
    """Host is one emulated host of a Cluster."""

    index: int
    netns: str       # network namespace name, e.g. hosts-1234-0-h1
    hostname: str    # what gethostname() returns on the host
    addr: str        # its IPv4 address on IFNAME
    keeper: subprocess.Popen | None = None
    pid: int = 0     # the keeper's PID in this (the root) PID namespace
    prefixlen: int = 24  # of the cluster's subnet

    def command(self, argv: list[str], cwd: str | None = None) -> list[str]:
        """command wraps argv so that it runs on this host (all namespaces)."""
        return ["nsenter", "-t", str(self.pid), "--net", "--mount", "--uts", "--pid",
                f"--wd={cwd or os.getcwd()}", "--"] + list(argv)

    def popen(self, argv: list[str], cwd: str | None = None, **kwargs) -> subprocess.Popen:
        """popen starts argv on this host; kwargs go to subprocess.Popen."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.Popen(self.command(argv, cwd), **kwargs)

    def run(self, argv: list[str], cwd: str | None = None, **kwargs) -> subprocess.CompletedProcess:
        """run runs argv on this host to completion; kwargs go to subprocess.run."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        return subprocess.run(self.command(argv, cwd), **kwargs)

    def pids(self) -> list[int]:
        """pids lists the host's processes (root-namespace PIDs), keeper excluded."""
        try:
            mine = os.readlink(f"/proc/{self.pid}/ns/pid")
        except OSError:
            return []
        out = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit() or int(entry) == self.pid:
                continue
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == mine:
                    out.append(int(entry))
            except OSError:
                pass
        return out

    def kill_processes(self, sig: int = signal.SIGKILL) -> list[int]:
        """kill_processes sends sig to every process of the host but its
        keeper, as if the host's ranks died; the host (and its /dev/shm) stay."""
        pids = self.pids()
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        return pids

    def set_link(self, up: bool):
        """set_link takes the host's link down (or back up), as a pulled cable."""
        _ip("link", "set", IFNAME, "up" if up else "down", ns=self.netns)
        if up:
            # Bringing an interface down drops its routes: restore the subnet's.
            _ip("addr", "replace", f"{self.addr}/{self.prefixlen}", "dev", IFNAME, ns=self.netns)

    def shm_entries(self) -> list[str]:
        """shm_entries lists the host's private /dev/shm (seen through the
        keeper's root, so it works while none of the host's ranks run)."""
        try:
            return sorted(os.listdir(f"/proc/{self.pid}/root/dev/shm"))
        except OSError:
            return []


class Cluster:
    """Cluster makes n emulated hosts and removes them; a context manager.

    rate      shape every link to a tc rate ("1gbit"), both directions; None: unshaped
    resolve   what each host's own hostname resolves to in its /etc/hosts:
              "loopback" (127.0.1.1, as Debian installs do) or "address"
              (its address on IFNAME); other hosts' names always resolve to
              their addresses
    subnet    the IPv4 subnet the hosts' addresses come from (private range)
    """

    def __init__(self, n: int, rate: str | None = None, resolve: str = "loopback",
                 subnet: str = DEFAULT_SUBNET, mtu: int | None = None):
        if n < 1:
            raise ValueError(f"a cluster needs at least one host, not {n}")
        if resolve not in ("loopback", "address"):
            raise ValueError(f"resolve={resolve!r}: expected 'loopback' or 'address'")
        net = ipaddress.ip_network(subnet)
        if not net.is_private or net.version != 4:
            raise ValueError(f"subnet {subnet}: use a private IPv4 range (10.0.0.0/8, 192.168.0.0/16)")
        if net.num_addresses < n + 11:
            raise ValueError(f"subnet {subnet} is too small for {n} hosts")
        self.n, self.rate, self.resolve, self.net, self.mtu = n, rate, resolve, net, mtu
        self.rate_bytes = parse_rate(rate) if rate else None
        self.tag = f"{PREFIX}{os.getpid()}-{next(_counter)}"
        self.switch = f"{self.tag}-sw"
        self.hosts: list[Host] = []
        self._made: list[str] = []
        self._dir: str | None = None

    # -- lifecycle ---------------------------------------------------------

    def __enter__(self) -> "Cluster":
        self.up()
        return self

    def __exit__(self, *exc):
        self.down()

    def __iter__(self):
        return iter(self.hosts)

    def __len__(self):
        return len(self.hosts)

    def __getitem__(self, i) -> Host:
        return self.hosts[i]

    @property
    def master(self) -> Host:
        """master is host 0, where the launchers' store listens."""
        return self.hosts[0]

    def up(self) -> "Cluster":
        """up makes the switch and every host; on any failure it removes
        what it made and raises."""
        reason = unavailable_reason()
        if reason:
            raise Unavailable(reason)
        sweep_stale()
        try:
            self._up()
        except BaseException:
            self.down()
            raise
        return self

    def _up(self):
        self._dir = tempfile.mkdtemp(prefix=self.tag + "-")
        addrs = [str(self.net.network_address + 11 + i) for i in range(self.n)]
        self.hosts = [Host(i, f"{self.tag}-h{i}", f"{self.tag}-h{i}", addrs[i],
                           prefixlen=self.net.prefixlen) for i in range(self.n)]
        self._add_netns(self.switch)
        _ip("link", "add", BRIDGE, "type", "bridge", ns=self.switch)
        _ip("link", "set", BRIDGE, "up", ns=self.switch)
        for h in self.hosts:
            self._add_netns(h.netns)
            port = PORT.format(h.index)
            _ip("link", "add", IFNAME, "type", "veth", "peer", "name", port, "netns", self.switch,
                ns=h.netns)
            if self.mtu:
                _ip("link", "set", IFNAME, "mtu", str(self.mtu), ns=h.netns)
                _ip("link", "set", port, "mtu", str(self.mtu), ns=self.switch)
            _ip("link", "set", port, "master", BRIDGE, "up", ns=self.switch)
            _ip("addr", "add", f"{h.addr}/{self.net.prefixlen}", "dev", IFNAME, ns=h.netns)
            _ip("link", "set", IFNAME, "up", ns=h.netns)
            _ip("link", "set", "lo", "up", ns=h.netns)
            if self.rate_bytes:
                self._shape(h.netns, IFNAME)
                self._shape(self.switch, port)
        for h in self.hosts:
            self._start_keeper(h)

    def _add_netns(self, name: str):
        _ip("netns", "add", name)
        self._made.append(name)

    def _shape(self, ns: str, dev: str):
        # The bucket holds a few milliseconds at the rate and at least one
        # 64 KiB GSO packet: a smaller burst makes tbf split every TSO packet
        # (CPU), a larger one lets bursts through above the rate.
        burst = max(64 << 10, self.rate_bytes // 250)
        subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root",
                        "tbf", "rate", self.rate, "burst", str(burst), "latency", "20ms"],
                       check=True, capture_output=True, text=True)

    def _hosts_file(self, h: Host) -> str:
        own = "127.0.1.1" if self.resolve == "loopback" else h.addr
        lines = ["127.0.0.1\tlocalhost", f"{own}\t{h.hostname}"]
        lines += [f"{o.addr}\t{o.hostname}" for o in self.hosts if o is not h]
        path = os.path.join(self._dir, f"hosts-{h.index}")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.chmod(path, 0o644)
        return path

    def _start_keeper(self, h: Host):
        script = (
            "set -e; mount -t tmpfs -o mode=1777 hosts-shm /dev/shm; "
            f"mount --bind {self._hosts_file(h)} /etc/hosts; hostname {h.hostname}; "
            f'exec {sys.executable} -c "$0"')
        h.keeper = subprocess.Popen(
            ["ip", "netns", "exec", h.netns, "unshare", "--mount", "--uts", "--pid",
             "--kill-child=SIGKILL", "--mount-proc", "--propagation", "private",
             "sh", "-c", script, _KEEPER],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            preexec_fn=_set_parent_death_signal)
        ready, _, _ = select.select([h.keeper.stdout], [], [], 20.0)
        line = h.keeper.stdout.readline().decode().strip() if ready else ""
        if line != "ready":
            h.keeper.kill()
            err = h.keeper.stderr.read().decode(errors="replace").strip()
            raise RuntimeError(f"host {h.hostname}: keeper did not start: {err or 'no output in 20s'}")
        # ip execs unshare, which forked the keeper: its only child.
        with open(f"/proc/{h.keeper.pid}/task/{h.keeper.pid}/children") as f:
            h.pid = int(f.read().split()[0])

    def down(self):
        """down kills every process of every host and removes every namespace
        of the cluster. Safe to call twice and after a failed up."""
        for h in self.hosts:
            h.kill_processes()
        for h in self.hosts:
            if h.keeper is not None:
                if h.keeper.poll() is None:
                    h.keeper.kill()
                try:
                    h.keeper.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
                for pipe in (h.keeper.stdout, h.keeper.stderr):
                    if pipe:
                        pipe.close()
        for name in reversed(self._made):
            _kill_netns_processes(name)
            _ip("netns", "del", name, check=False)
        self._made.clear()
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    # -- running commands --------------------------------------------------

    def env(self, h: Host, base: dict | None = None) -> dict:
        """env is the environment a command on host h gets: base (default
        os.environ) plus HOSTS_* facts, and GLOO_SOCKET_IFNAME (Gloo binds
        what the hostname resolves to, loopback here) unless base sets it.
        GOHCCL_SOCKET_IFNAME is deliberately not set: gohccl finds its
        interface on its own."""
        env = dict(os.environ if base is None else base)
        env.update({"HOSTS_INDEX": str(h.index), "HOSTS_COUNT": str(self.n),
                    "HOSTS_ADDR": h.addr, "HOSTS_MASTER": self.master.addr,
                    "HOSTS_IFNAME": IFNAME, "HOSTS_TAG": self.tag})
        env.setdefault("GLOO_SOCKET_IFNAME", IFNAME)
        return env

    def substitute(self, h: Host, argv: list[str]) -> list[str]:
        """substitute replaces, in each word of argv, {host} (h's index),
        {hosts} (their number), {addr} (h's address), {master} (host 0's
        address), {mastername} (host 0's hostname), {hostname} (h's) and
        {ifname} with their values."""
        words = {"{host}": str(h.index), "{hosts}": str(self.n), "{addr}": h.addr,
                 "{master}": self.master.addr, "{mastername}": self.master.hostname,
                 "{hostname}": h.hostname, "{ifname}": IFNAME}
        out = []
        for word in argv:
            for k, v in words.items():
                word = word.replace(k, v)
            out.append(word)
        return out

    def describe(self) -> str:
        rows = [f"{self.tag}: {self.n} hosts on {self.net}, bridge {BRIDGE} in {self.switch}, "
                f"links {self.rate or 'unshaped'}"]
        for h in self.hosts:
            rows.append(f"  host {h.index}: {h.hostname} {h.addr} dev {IFNAME}  "
                        f"enter: nsenter -t {h.pid} -n -m -u -p")
        return "\n".join(rows)


# --------------------------------------------------------------------------
# CLI
# --------------------------------------------------------------------------

def _pump(stream, prefix: str, out):
    for raw in iter(stream.readline, b""):
        out.write(prefix + raw.decode(errors="replace"))
        out.flush()
    stream.close()


def run_on_all(cluster: Cluster, argv: list[str], prefix: bool = True, grace: float = 30.0,
               timeout: float | None = None) -> int:
    """run_on_all runs argv (placeholders substituted) on every host at once
    and returns the first nonzero exit status, or 0. Once one host's command
    fails, the others get `grace` seconds before they are killed."""
    procs, pumps = [], []
    for h in cluster:
        p = h.popen(cluster.substitute(h, argv), env=cluster.env(h),
                    stdout=subprocess.PIPE if prefix else None,
                    stderr=subprocess.STDOUT if prefix else None)
        procs.append(p)
        if prefix:
            t = threading.Thread(target=_pump, args=(p.stdout, f"[h{h.index}] ", sys.stdout), daemon=True)
            t.start()
            pumps.append(t)
    start = time.monotonic()
    failed_at = None
    while any(p.poll() is None for p in procs):
        now = time.monotonic()
        if failed_at is None and any(p.poll() not in (None, 0) for p in procs):
            failed_at = now
        if (failed_at is not None and now - failed_at > grace) or (timeout and now - start > timeout):
            why = "timeout" if failed_at is None else f"a host failed {grace:.0f}s ago"
            print(f"netns: killing what still runs ({why})", file=sys.stderr)
            for h in cluster:
                h.kill_processes()
            break
        time.sleep(0.1)
    codes = []
    for p in procs:
        try:
            codes.append(p.wait(timeout=10))
        except subprocess.TimeoutExpired:
            p.kill()
            codes.append(p.wait())
    for t in pumps:
        t.join(timeout=5)
    return next((c for c in codes if c != 0), 0)


def _raise_exit(signum, _frame):
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python tests/netns.py",
        description="Emulated hosts: network namespaces joined by a bridge, each with its own "
                    "/dev/shm and hostname (docs/hosts.md).")
    sub = ap.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up", help="make the hosts, run CMD on each (or wait for Ctrl-C), remove them")
    up.add_argument("--hosts", type=int, default=2, help="number of hosts (default 2)")
    up.add_argument("--rate", help="shape each link to this tc rate, both ways (e.g. 1gbit)")
    up.add_argument("--resolve", choices=("loopback", "address"), default="loopback",
                    help="what each host's own hostname resolves to (default loopback, as on Debian)")
    up.add_argument("--subnet", default=DEFAULT_SUBNET, help=f"private IPv4 subnet (default {DEFAULT_SUBNET})")
    up.add_argument("--mtu", type=int, help="MTU of every link (default the kernel's, 1500)")
    up.add_argument("--no-prefix", action="store_true", help="do not prefix output lines with [hN]")
    up.add_argument("--grace", type=float, default=30.0,
                    help="seconds the other hosts' commands may run after one fails (default 30)")
    up.add_argument("--timeout", type=float, help="kill every command after this many seconds")
    up.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD... to run on every host")
    sub.add_parser("list", help="list live namespaces of this module (any run)")
    sub.add_parser("clean", help="remove namespaces left by runs whose owner is gone")
    args = ap.parse_args(argv)

    if args.cmd == "list":
        for name in _netns_names():
            if name.startswith(PREFIX):
                print(name)
        return 0
    if args.cmd == "clean":
        for name in sweep_stale():
            print(f"removed {name}")
        return 0

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise_exit)
    try:
        with Cluster(args.hosts, rate=args.rate, resolve=args.resolve, subnet=args.subnet,
                     mtu=args.mtu) as cluster:
            print(cluster.describe(), file=sys.stderr, flush=True)
            if not command:
                print("netns: hosts are up; Ctrl-C removes them", file=sys.stderr, flush=True)
                while True:
                    time.sleep(3600)
            return run_on_all(cluster, command, prefix=not args.no_prefix, grace=args.grace,
                              timeout=args.timeout)
    except Unavailable as exc:
        print(f"netns: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
