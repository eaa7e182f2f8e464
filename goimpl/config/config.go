// Package config is the one registry of gohccl's GOHCCL_* environment
// variables: each is declared once here, with its type, default and meaning.
//
// Configuration is read when a communicator is created, through a lookup
// function the caller supplies (the C ABI reads the C environment, because Go
// sees only the environment as it was when the library loaded), never with
// os.Getenv at use time.
package config

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// Var declares one environment variable.
type Var struct {
	Name    string
	Type    string
	Default string
	Doc     string
}

// Vars lists every variable gohccl reads, in the order the README shows them.
var Vars = []Var{
	{"GOHCCL_BUFFSIZE", "bytes (K/M/G suffix allowed)", "8M",
		"Scratch memory each communicator preallocates and reuses. Larger messages stream through it in chunks; a larger buffer means fewer, longer steps (less per-step latency), a smaller one less memory per communicator. Minimum 64K; at most an eighth of the host's physical memory (each communicator holds about twice it: the scratch and its share of the shared segment). Must be the same on every rank."},
	{"GOHCCL_DEBUG", "WARN | INFO | TRACE", "WARN",
		"Log level on stderr, each line prefixed with the rank. INFO prints each communicator's ranks, transports and algorithm choices; TRACE every operation."},
	{"GOHCCL_ALGO", "string", "auto",
		"Restricts the table of schedules (docs/algorithms.md) in HCCL's syntax: a row (`ring`, `tree`, `dtree`, `rhd`, `binomial`, `bruck`, `mesh.oneshot`, `mesh.twophase`, `mesh.singlecopy`, `mesh.eager`), a family (`mesh`: the shared-memory engine's rows), `level0:ring;level1:tree` (level0 `ring`, `rhd` or `mesh`), or per collective `allreduce=level0:mesh;level1:rhd/allgather=ring`. The tuner prices what the value allows and takes the cheapest. A malformed value is refused at init; a form that cannot run for an op falls back to the automatic choice with one warning. `auto` prices every row."},
	{"GOHCCL_RANKS_PER_NODE", "integer", "",
		"Treat each k consecutive ranks as one node for the hierarchical algorithms and the tuner, instead of grouping ranks by the host identity bootstrap learned. Useful to try level0/level1 on one host."},
	{"GOHCCL_INTRA_LATENCY", "microseconds", "5",
		"Tuner's latency per step between ranks of one node (alpha). Only the choice of algorithm depends on it."},
	{"GOHCCL_INTRA_BW", "GB/s (decimal)", "3",
		"Tuner's bandwidth per rank between ranks of one node (1/beta)."},
	{"GOHCCL_INTER_LATENCY", "microseconds", "",
		"Tuner's latency per step between nodes. Empty: measured at init (half the median round trip of small frames between rank 0 and the lowest rank on another node, over the links the collectives use; rank 0's figures are agreed by every rank; a later communicator over the same two hosts reuses them), which INFO prints. Set it (on rank 0, which decides for all) to skip the measurement."},
	{"GOHCCL_INTER_BW", "GB/s (decimal)", "",
		"Tuner's bandwidth per rank between nodes (1.25 = 10 Gb/s Ethernet; 12.5 = 100 Gb/s RoCE). Empty: measured at init by the same pair of ranks, both sending at once in rounds that double until one lasts 8 ms or carries 16 MiB each way, each timed from its start to the last arrival; the slower direction counts; then, where the first two nodes have several ranks, their i-th ranks pair up and burst all at once, and if rank 0's pair gets under 80% of its rate alone beside the others, the ranks of a node are priced as sharing one link (INFO says so). Set both INTER variables to skip the probe (and take every rank to have a link of its own)."},
	{"GOHCCL_TRANSPORT", "auto | tcp | shm", "auto",
		"How ranks reach each other. auto: shared memory between ranks of one host (detected from hostname, boot id and a probe that each rank sees the segment the first one created), TCP across hosts. tcp: TCP everywhere. shm: like auto, but init fails if ranks that claim one host cannot share memory."},
	{"GOHCCL_EARLY_BYTES", "bytes (K/M/G suffix allowed)", "64M",
		"Most payload bytes a rank holds, per peer (over TCP or shared memory), of frames that arrived before their receive was posted. Past it the rank stops reading that connection or ring until the receive is posted, so the peer's sends wait (TCP flow control; a full ring): no peer can grow a rank's memory without bound. The default is one point-to-point frame (64 MiB), so a send up to that size never waits for its receive; collectives never need more than a segment. Minimum 1M."},
	{"GOHCCL_NSOCKS", "auto | 1-8", "auto",
		"TCP connections per pair of ranks on different hosts; a large frame (128 KiB and up) is cut into parts sent over all of them at once. auto: half the cores each rank of the host can have (GOMAXPROCS over the ranks on the host), at least 1 and at most 4, since each connection's kernel copies take a core at full speed. The ranks connecting decide (the higher rank of each pair), so values may differ across ranks. Peers on the same host that use shared memory always get one."},
	{"GOHCCL_SOCKET_IFNAME", "interface name", "",
		"Network interface whose IPv4 address the TCP transport listens on. Empty: the address of the interface that routes to MASTER_ADDR; when MASTER_ADDR names this host and resolves to loopback (Debian's 127.0.1.1), the interface of the default route, else the first non-loopback interface. Loopback only when MASTER_ADDR is loopback (localhost, 127.x) or the host has no other interface."},
	{"GOHCCL_PEER_TIMEOUT", "seconds (decimal), 0 = off", "5",
		"How long a peer may stay silent at the TCP level before it is declared lost: its host answers neither data, retransmissions nor keepalive probes (sent after idle time of a fifth of this, at least 1 s). Every rank then fails with an error naming the peer's rank, host and address instead of waiting out the op's timeout. The same bound applies at bootstrap to a published address that refuses or does not answer connections. Shorter notices a dead host sooner; longer rides out longer network outages. 0 leaves it to the kernel (minutes) and the op timeout."},
	{"GOHCCL_PORT_RANGE", "lo-hi (ports)", "",
		"Ports the TCP listener may bind, for firewalled clusters, e.g. `29600-29700`; each rank takes a free one in the range (starting at a random one), and init fails naming the range when every port in it is taken. A host needs at least as many ports as ranks it runs per communicator. Empty: any free port the kernel picks."},
	{"GOHCCL_SIMD", "auto | scalar | avx2 | avx512", "auto",
		"Forces a reduce-kernel path; refused if this CPU lacks the instructions. auto picks the best this CPU has."},
	{"GOHCCL_TUNE", "auto | model | measure", "auto",
		"How the tuner picks a row of the table for each collective and size class (docs/algorithms.md, \"Measured choices\"). model: the cheapest by the model's price, from the host's measured figures and the links' latency and bandwidth. measure: the first ops of each class run the rows the model ranks best (every row of the engine, two each of the links and the hierarchy, but no link row on one host whose ranks share the engine), 16 ops in a row each where 16 of the class's cheapest row are priced at up to 5 ms, else 4, in three passes; a pass's time is the slowest rank's median of its ops after the first, agreed by one small all-reduce, and the ranks keep the row whose median pass was fastest; a class that keeps running is measured again after about 2 s and 16 s of its ops, each row's best median over the trials counting (a trial that ran while the machine was slow is not kept for good). auto: measure where the model is known to mislead: on one host whose ranks have a core each and share the engine (its rows are priced from a few figures of the host, which ranked them wrongly by up to 1.6x), and across several hosts of which one runs more of its ranks than the cores they may run on together (the union of their affinity masks; every step then waits for descheduled ranks, which the network's price does not see); else model: on one crowded host the trial's ops move more with the scheduler than the rows differ, and across uncrowded hosts the links are priced from the probe's figures. Must be the same on every rank."},
	{"GOHCCL_WAIT", "auto | spin | sleep", "auto",
		"How a rank waits for a peer on shared memory. auto: spin up to 50 us, then poll with sched_yield up to 2 ms while the host has a core for every runnable thread, but spin (50 us while the communicator's recent waits were answered within that, else 10 us) while it does not, which each communicator finds out as it runs: where the host's runnable threads in /proc/loadavg, averaged over its samples, are at least one more than its online cores, the yield phase follows, and ends at the first yield that loses the core for a slice; where its own waits lost their core in the last 20 ms, the spin is followed by a sleep on a futex; with more local ranks than the cores they may run on together, spin only 10 us, yielding, and then sleep (docs/transports.md, \"Waiting\"). spin: always poll (a dedicated machine, one rank per core, nothing else running). sleep: always take the host as busy (a machine shared with compute threads or other jobs)."},
	{"GOHCCL_TRACE_BUFFER", "integer (entries)", "2000",
		"Flight recorder: how many of its latest collectives and sends/receives each communicator keeps (sequence number, kind, dtype, count, root or peer, schedule, times, state, peers awaited; docs/trace.md). Fixed memory, 136 bytes an entry; recording allocates nothing. 0 turns the recorder off. At most 1048576."},
	{"GOHCCL_TRACE_DIR", "directory", "",
		"Where each rank writes its flight record (one JSON file per rank and group) when a collective times out, ranks mismatch or a peer is lost, and on SIGUSR1. Empty: no automatic dumps and no signal handler; `gohccl.dump_trace(dir)` still works. Analyse with `python -m gohccl.trace DIR`."},
	{"GOHCCL_ACL_LIBRARY", "path", "",
		"The Ascend runtime (libascendcl.so) gohccl loads when a call first passes ACL device memory (docs/devices.md). Empty: the copy already loaded in the process (by torch_npu), else `libascendcl.so` on the loader's path, else /usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so. A process that passes only host memory never loads it."},
	{"GOHCCL_CUDA_LIBRARY", "path", "",
		"The CUDA runtime (libcudart) gohccl loads when a call first passes CUDA device memory (docs/devices.md). Empty: the copy already loaded in the process (`import torch` loads its wheel's libcudart.so.13 or .12), else `libcudart.so.13`, `libcudart.so.12` on the loader's path or in /usr/local/cuda/lib64. A process that passes only host memory never loads it."},
}

// Level is a log level.
type Level int

// Log levels, most severe first.
const (
	Warn Level = iota
	Info
	Trace
)

func (l Level) String() string { return [...]string{"WARN", "INFO", "TRACE"}[l] }

// Config is a communicator's configuration, parsed and validated.
type Config struct {
	// BuffSize is the scratch size in bytes (GOHCCL_BUFFSIZE).
	BuffSize int64
	// Debug is the log level (GOHCCL_DEBUG).
	Debug Level
	// Algo is the raw algorithm override (GOHCCL_ALGO); "" or "auto" for none.
	Algo string
	// Transport is "auto", "tcp" or "shm" (GOHCCL_TRANSPORT).
	Transport string
	// EarlyBytes bounds, per peer, the bytes of frames held before their
	// receive is posted (GOHCCL_EARLY_BYTES).
	EarlyBytes int64
	// NSocks is the number of TCP connections per remote peer
	// (GOHCCL_NSOCKS); 0 means automatic.
	NSocks int
	// SocketIfname picks the listening interface (GOHCCL_SOCKET_IFNAME).
	SocketIfname string
	// PeerTimeout is how long a peer may stay silent before it is declared
	// lost (GOHCCL_PEER_TIMEOUT); 0 for never.
	PeerTimeout time.Duration
	// PortLo and PortHi bound the TCP listener's port (GOHCCL_PORT_RANGE);
	// both 0 for any.
	PortLo, PortHi int
	// SIMD forces a reduce path (GOHCCL_SIMD); "" or "auto" for the best.
	SIMD string
	// Tune is "auto", "model" or "measure" (GOHCCL_TUNE): whether the
	// tuner measures its candidates on the first ops of each size class.
	Tune string
	// Wait is "auto", "spin" or "sleep" (GOHCCL_WAIT): whether waits on
	// shared memory learn if the host is busy, or take it as idle or busy.
	Wait string
	// RanksPerNode, when above 0, makes each RanksPerNode consecutive ranks
	// one node (GOHCCL_RANKS_PER_NODE).
	RanksPerNode int
	// IntraLatency and InterLatency are the tuner's per-step latencies in
	// seconds, IntraBW and InterBW its per-rank bandwidths in bytes per
	// second (GOHCCL_INTRA_LATENCY, ...). An inter figure of 0 (unset) is
	// measured at init (comm's probe of the inter-node link).
	IntraLatency, IntraBW, InterLatency, InterBW float64
	// TraceBuffer is the flight recorder's capacity in entries, 0 for none
	// (GOHCCL_TRACE_BUFFER); TraceDir is where failures and SIGUSR1 dump it
	// (GOHCCL_TRACE_DIR), empty for nowhere.
	TraceBuffer int
	TraceDir    string
	// ACLLibrary and CUDALibrary, when set, are where the Ascend and CUDA
	// runtimes are loaded from (GOHCCL_ACL_LIBRARY, GOHCCL_CUDA_LIBRARY);
	// empty means the default search (docs/devices.md).
	ACLLibrary, CUDALibrary string
}

// MaxNSocks bounds GOHCCL_NSOCKS (the TCP transport's MaxStripes).
const MaxNSocks = 8

// MinEarlyBytes is the smallest GOHCCL_EARLY_BYTES: a collective segment.
const MinEarlyBytes = 1 << 20

// MaxTraceBuffer bounds the flight recorder: a million entries (136 bytes
// each) is 136 MiB per communicator, past any use a dump has.
const MaxTraceBuffer = 1 << 20

// MinBuffSize is the smallest scratch a communicator accepts.
const MinBuffSize = 64 << 10

// Default returns the configuration with every variable unset.
func Default() Config {
	c, err := Load(func(string) (string, bool) { return "", false })
	if err != nil {
		panic(err) // the defaults above must parse
	}
	return c
}

// Load reads every registered variable through lookup and validates it. A
// malformed value is refused with an error naming the variable.
func Load(lookup func(name string) (string, bool)) (Config, error) {
	get := func(name string) string {
		if v, ok := lookup(name); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
		for _, v := range Vars {
			if v.Name == name {
				return v.Default
			}
		}
		panic("config: unregistered variable " + name)
	}
	var c Config
	var err error
	if c.BuffSize, err = ParseBytes(get("GOHCCL_BUFFSIZE")); err != nil {
		return c, fmt.Errorf("GOHCCL_BUFFSIZE: %v", err)
	}
	switch strings.ToUpper(get("GOHCCL_DEBUG")) {
	case "WARN", "WARNING":
		c.Debug = Warn
	case "INFO":
		c.Debug = Info
	case "TRACE":
		c.Debug = Trace
	default:
		return c, fmt.Errorf("GOHCCL_DEBUG=%q: want WARN, INFO or TRACE", get("GOHCCL_DEBUG"))
	}
	c.Algo = strings.ToLower(get("GOHCCL_ALGO"))
	if _, err := tune.ParseAlgo(c.Algo); err != nil {
		return c, err
	}
	if v := get("GOHCCL_RANKS_PER_NODE"); v != "" {
		if c.RanksPerNode, err = strconv.Atoi(v); err != nil || c.RanksPerNode < 1 {
			return c, fmt.Errorf("GOHCCL_RANKS_PER_NODE=%q: want a positive integer", v)
		}
	}
	for _, f := range []struct {
		name  string
		dst   *float64
		scale float64
	}{{"GOHCCL_INTRA_LATENCY", &c.IntraLatency, 1e-6}, {"GOHCCL_INTRA_BW", &c.IntraBW, 1e9},
		{"GOHCCL_INTER_LATENCY", &c.InterLatency, 1e-6}, {"GOHCCL_INTER_BW", &c.InterBW, 1e9}} {
		if get(f.name) == "" {
			continue // measured at init (GOHCCL_INTER_*)
		}
		v, err := strconv.ParseFloat(get(f.name), 64)
		if err != nil || math.IsNaN(v) || v <= 0 || v > 1e9 {
			return c, fmt.Errorf("%s=%q: want a positive number up to 1e9", f.name, get(f.name))
		}
		*f.dst = v * f.scale
	}
	switch c.Transport = strings.ToLower(get("GOHCCL_TRANSPORT")); c.Transport {
	case "auto", "tcp", "shm":
	default:
		return c, fmt.Errorf("GOHCCL_TRANSPORT=%q: want auto, tcp or shm", get("GOHCCL_TRANSPORT"))
	}
	if c.TraceBuffer, err = strconv.Atoi(get("GOHCCL_TRACE_BUFFER")); err != nil {
		return c, fmt.Errorf("GOHCCL_TRACE_BUFFER=%q: want a number of entries (0 turns the recorder off)", get("GOHCCL_TRACE_BUFFER"))
	}
	c.TraceDir = get("GOHCCL_TRACE_DIR")
	c.SocketIfname = get("GOHCCL_SOCKET_IFNAME")
	if err := c.loadNetwork(get); err != nil {
		return c, err
	}
	if v := strings.ToLower(get("GOHCCL_NSOCKS")); v != "auto" {
		if c.NSocks, err = strconv.Atoi(v); err != nil || c.NSocks < 1 || c.NSocks > MaxNSocks {
			return c, fmt.Errorf("GOHCCL_NSOCKS=%q: want auto or 1 to %d", v, MaxNSocks)
		}
	}
	if c.EarlyBytes, err = ParseBytes(get("GOHCCL_EARLY_BYTES")); err != nil {
		return c, fmt.Errorf("GOHCCL_EARLY_BYTES: %v", err)
	}
	if c.EarlyBytes < MinEarlyBytes || c.EarlyBytes > 1<<40 {
		return c, fmt.Errorf("GOHCCL_EARLY_BYTES=%d: want between 1M and 1T", c.EarlyBytes)
	}
	c.SIMD = strings.ToLower(get("GOHCCL_SIMD"))
	if _, err := reduce.PathNamed(c.SIMD); err != nil {
		return c, fmt.Errorf("GOHCCL_SIMD=%q: %v", get("GOHCCL_SIMD"), err)
	}
	switch c.Tune = strings.ToLower(get("GOHCCL_TUNE")); c.Tune {
	case "auto", "model", "measure":
	default:
		return c, fmt.Errorf("GOHCCL_TUNE=%q: want auto, model or measure", get("GOHCCL_TUNE"))
	}
	switch c.Wait = strings.ToLower(get("GOHCCL_WAIT")); c.Wait {
	case "auto", "spin", "sleep":
	default:
		return c, fmt.Errorf("GOHCCL_WAIT=%q: want auto, spin or sleep", get("GOHCCL_WAIT"))
	}
	c.ACLLibrary = get("GOHCCL_ACL_LIBRARY")
	c.CUDALibrary = get("GOHCCL_CUDA_LIBRARY")
	return c, c.Validate()
}

// Validate checks value ranges.
func (c Config) Validate() error {
	if c.BuffSize < MinBuffSize {
		return fmt.Errorf("GOHCCL_BUFFSIZE=%d: below the minimum of %d bytes", c.BuffSize, MinBuffSize)
	}
	if c.TraceBuffer < 0 || c.TraceBuffer > MaxTraceBuffer {
		return fmt.Errorf("GOHCCL_TRACE_BUFFER=%d: want 0 to %d entries", c.TraceBuffer, MaxTraceBuffer)
	}
	if c.BuffSize > 1<<40 {
		return fmt.Errorf("GOHCCL_BUFFSIZE=%d: above 1T", c.BuffSize)
	}
	if mem := PhysicalMemory(); mem > 0 && c.BuffSize > mem/MaxBuffShare {
		return fmt.Errorf("GOHCCL_BUFFSIZE=%d: above an eighth of this host's physical memory (%d bytes), the most a communicator may take", c.BuffSize, mem)
	}
	return nil
}

// MaxBuffShare bounds GOHCCL_BUFFSIZE to this fraction (1/MaxBuffShare) of
// physical memory: a communicator holds about twice the buffer (its scratch,
// and its share of the host's shared segment), several ranks share a host,
// and a value past what the host has made the Go runtime abort the process
// instead of failing the call.
const MaxBuffShare = 8

// PhysicalMemory returns the host's memory in bytes (MemTotal in
// /proc/meminfo), or 0 where it cannot be read.
func PhysicalMemory() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}

// SharedVars are the variables every rank of a communicator must set alike:
// the buffer decides the shared segment's layout and the chunking of every
// schedule, the transport which links exist, the algorithm, nodes and the
// tuner's figures within a node which schedule every rank runs. The figures
// between nodes are not among them: every rank takes rank 0's (comm's
// probe). Bootstrap compares them
// and fails naming the variable and the ranks that differ. The others
// (log level, interface, SIMD path, runtime libraries) are each rank's own.
var SharedVars = []string{"GOHCCL_BUFFSIZE", "GOHCCL_TRANSPORT", "GOHCCL_ALGO", "GOHCCL_TUNE", "GOHCCL_RANKS_PER_NODE",
	"GOHCCL_INTRA_LATENCY", "GOHCCL_INTRA_BW"}

// Shared returns the values of SharedVars as c holds them, normalised
// (bytes as a number, names in lower case, figures in their units), so
// that two ways of writing one value agree.
func (c Config) Shared() map[string]string {
	algo := c.Algo
	if algo == "" {
		algo = "auto"
	}
	g := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	return map[string]string{
		"GOHCCL_BUFFSIZE":       strconv.FormatInt(c.BuffSize, 10),
		"GOHCCL_TRANSPORT":      c.Transport,
		"GOHCCL_ALGO":           algo,
		"GOHCCL_TUNE":           c.Tune,
		"GOHCCL_RANKS_PER_NODE": strconv.Itoa(c.RanksPerNode),
		"GOHCCL_INTRA_LATENCY":  g(c.IntraLatency),
		"GOHCCL_INTRA_BW":       g(c.IntraBW),
	}
}

// ParseBytes parses a byte count: digits with an optional K, M or G suffix
// (powers of 1024; a trailing B or iB is accepted).
func ParseBytes(s string) (int64, error) {
	t := strings.ToUpper(strings.TrimSpace(s))
	t = strings.TrimSuffix(t, "IB")
	t = strings.TrimSuffix(t, "B")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult, t = 1<<10, t[:n-1]
		case 'M':
			mult, t = 1<<20, t[:n-1]
		case 'G':
			mult, t = 1<<30, t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a byte count (e.g. 8388608, 512K, 8M, 1G)", s)
	}
	if v > (1<<62)/mult {
		return 0, fmt.Errorf("%q is too large", s)
	}
	return v * mult, nil
}

// Markdown renders the registry as the README's table.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| Variable | Type | Default | Meaning |\n|---|---|---|---|\n")
	for _, v := range Vars {
		d := v.Default
		if d == "" {
			d = "(unset)"
		}
		fmt.Fprintf(&b, "| `%s` | %s | `%s` | %s |\n", v.Name, v.Type, d, v.Doc)
	}
	return b.String()
}
