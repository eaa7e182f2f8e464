// Package comm is the communicator: one rank's membership in a group, its
// links to every peer, the sequence number that stamps each collective, the
// preallocated scratch, deadlines and the error state.
//
// A Comm is created by New (a bootstrap over a rendezvous.Store) or FromMesh
// (tests over an in-process mesh). Collectives must be issued in the same
// order on every rank; they are serialized on a Comm. Send and receive may
// run concurrently with them.
package comm

import (
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/gohccl/gohccl/goimpl/algo"
	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/flight"
	"github.com/gohccl/gohccl/goimpl/mesh"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/topo"
	"github.com/gohccl/gohccl/goimpl/transport"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// Sentinel errors of the communicator; transport's sentinels (ErrTimeout,
// ErrPeerLost, ErrMismatch, ErrClosed) pass through wrapped.
var (
	// ErrInvalid: the caller's arguments are wrong; nothing was sent and the
	// communicator is still usable.
	ErrInvalid = errors.New("invalid argument")
	// ErrBroken: an earlier operation failed; this one was not started.
	ErrBroken = errors.New("communicator is broken by an earlier error")
	// ErrBootstrap: the ranks could not find or connect to each other.
	ErrBootstrap = errors.New("bootstrap failed")
	// ErrSettings: the ranks' values of a GOHCCL_* variable that must be
	// the same on every rank (config.SharedVars) differ; a bootstrap
	// failure of the configuration's kind.
	ErrSettings = errors.New("settings differ across ranks")
)

// maxSegment caps the streaming unit: reduce kernels run at memory speed
// only on data in cache (DESIGN.md), and one segment of each receive slot and
// the accumulator should fit in L2 together.
const maxSegment = 1 << 20

// Options configures a communicator.
type Options struct {
	Rank, Size int
	// Timeout bounds the bootstrap and is the default deadline of every op.
	Timeout time.Duration
	Config  config.Config
	// MasterAddr, when set, is the host ranks rendezvous at; the TCP
	// transport listens on the interface that routes to it.
	MasterAddr string
	// CapProcs lowers GOMAXPROCS to this host's cores divided by the ranks
	// on it (at least 2), so that several ranks' Go runtimes do not each
	// spin up a thread per core. Set it unless the user set GOMAXPROCS.
	CapProcs bool
	// Hosts is the host identity of every rank, for FromMesh (New learns
	// it in the bootstrap); nil puts every rank on one node.
	Hosts []string
}

// Comm is one rank's communicator.
type Comm struct {
	rank, size int
	timeout    time.Duration
	cfg        config.Config
	mesh       *transport.Mesh
	log        *Logger
	id         string // short communicator id for logs

	mu      sync.Mutex // serializes collectives
	seq     uint64
	op      algo.Op
	scratch []byte

	// announced is the sequence number of the last collective this rank
	// announced to its peers (watch).
	announced atomic.Uint64

	broken   atomic.Pointer[error]
	failOnce sync.Once // the first failure notifies the peers and closes the mesh
	closed   atomic.Bool
	p2p      p2pState

	// hosts is each rank's host identity; topo groups ranks into nodes by
	// it (or by GOHCCL_RANKS_PER_NODE); tuner chooses every collective's
	// schedule from goimpl/tune's table.
	hosts []string
	// crowded says a machine of the group (hosts sharing a kernel) runs
	// more of its ranks than the cores they may run on together
	// (bootstrap's records: the union of their affinity masks): across
	// several hosts the tuner then measures (GOHCCL_TUNE=auto).
	crowded bool
	// share is how many of the group's ranks each core of the most
	// crowded machine runs (1 unless crowded): the engine's prices scale
	// with it.
	share float64
	topo  *topo.Topology
	tuner *tune.Tuner
	// path is the reduce kernels' instruction set (GOHCCL_SIMD), this
	// communicator's own.
	path *reduce.Path

	// local, when set, is the shared memory with the other ranks of this
	// host (local.go).
	local *local

	// What a collective runs with, reused so that none allocates: the
	// exec (op, engine and call, hierarchy), the engine's call, the
	// arguments, and the last choice (for logs).
	x      tune.Exec
	call   mesh.Call
	args   tune.Args
	choice tune.Choice
	// flight is the flight recorder (nil when GOHCCL_TRACE_BUFFER=0), rec
	// the record of the collective in progress and started when it began,
	// dumped whether the failure dump was written (flight.go).
	flight  *flight.Recorder
	rec     uint64
	started time.Time
	dumped  atomic.Bool
	// pinned, where set, is the choice of its collective instead of the
	// tuner's: the tests pin every row of the table in turn.
	pinned [tune.NumColls]tune.Choice
	// measured says the collective in progress is one of a trial of the
	// tuner's (measuredColl moving measuredBytes), whose time end reports.
	measured      bool
	measuredColl  tune.Coll
	measuredBytes int
}

func newComm(mesh *transport.Mesh, opt Options, id string, log *Logger) *Comm {
	seg := min(int(opt.Config.BuffSize)/4, maxSegment) &^ 63
	c := &Comm{
		rank: opt.Rank, size: opt.Size, timeout: opt.Timeout, cfg: opt.Config,
		mesh: mesh, log: log, id: id,
		scratch: make([]byte, opt.Config.BuffSize),
		flight:  flight.New(opt.Config.TraceBuffer),
	}
	c.op = algo.Op{Mesh: mesh, Scratch: c.scratch, Segment: seg,
		Recvs: make([]transport.Recv, 2*opt.Size+2)}
	c.x = tune.Exec{Op: &c.op, Call: &c.call}
	c.p2p.init()
	mesh.Matcher().OnFail(c.failFromMatcher)
	mesh.Matcher().SetWatch(announceAfter, c.watch)
	return c
}

// announceAfter is how long a collective waits before it tells its peers
// which op it is in (and how often a sleeping receive looks at the
// watch): long past a small op's round trip (microseconds to a
// millisecond), so that ops that flow announce nothing, and short enough
// that a mismatch no frame reveals is named at once to a person.
const announceAfter = 10 * time.Millisecond

// watch runs while a collective of this rank waits (the links' receives
// every announceAfter, the engine's waits between sleeps once the op is
// announceAfter old): the first time
// in each op it sends every peer an announce frame with the op's stamp, so
// that a peer which runs another op as this sequence number, and shares no
// frame with this rank in it (a rooted op with another root, an op of the
// shared-memory engine against one of the links), names the mismatch at
// once. The peers compare it in their matchers (transport.Matcher.Begin).
func (c *Comm) watch() error {
	seq := c.op.Stamp.Seq
	if old := c.announced.Load(); seq == 0 || old >= seq || !c.announced.CompareAndSwap(old, seq) {
		return nil
	}
	h := transport.AnnounceFrame(&c.op.Stamp)
	deadline := c.op.Deadline
	for p := 0; p < c.size; p++ {
		if p != c.rank {
			// Sent beside the op, never in its way: a link busy with
			// the op's own frames takes it after them.
			go func() {
				hp := h
				_ = c.mesh.Send(p, &hp, nil, deadline)
			}()
		}
	}
	return nil
}

// engineStop is the shared-memory engine's stop check: the links' health
// (a lost peer, an abort frame, a mismatch the matcher found), and the
// watch.
func (c *Comm) engineStop() error {
	if err := c.mesh.Matcher().Health(); err != nil {
		return err
	}
	// As over the links, only an op that has waited announceAfter
	// announces itself: a wait that sleeps at once (a busy host) must not
	// send announce frames, and allocate, on every op.
	if time.Since(c.started) < announceAfter {
		return nil
	}
	return c.watch()
}

// initTuning parses GOHCCL_ALGO and GOHCCL_SIMD, groups the ranks into
// nodes and sets up the tuner over the table, with what the ranks agreed of
// their shared memory (facts; zero without any). An unknown algorithm or
// malformed form fails the communicator's creation.
func (c *Comm) initTuning(hosts []string, facts meshFacts, inter interLink) error {
	spec, err := tune.ParseAlgo(c.cfg.Algo)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	if c.path, err = reduce.PathNamed(c.cfg.SIMD); err != nil {
		return fmt.Errorf("%w: GOHCCL_SIMD: %v", ErrInvalid, err)
	}
	c.hosts = hosts
	c.topo = nodesOf(c.cfg, c.size, hosts)
	if l0, l1, err := c.topo.Levels(c.rank); err == nil {
		c.x.Hier = algo.Hierarchy{Local: l0, Cross: l1, Order: c.topo.SliceOrder()}
	}
	m := tune.DefaultModel()
	if c.cfg.IntraBW > 0 { // set by config.Load; a literal Config keeps the defaults
		m.Intra = tune.Link{Latency: c.cfg.IntraLatency, Bandwidth: c.cfg.IntraBW}
	}
	// The inter-node link: what the ranks agreed at bootstrap (measured,
	// or rank 0's GOHCCL_INTER_*), else this rank's settings, else the
	// defaults (a communicator without a store, or on one node).
	switch {
	case inter.valid():
		m.Inter, m.NodeBW = inter.link, inter.nodeBW
	default:
		if c.cfg.InterLatency > 0 {
			m.Inter.Latency = c.cfg.InterLatency
		}
		if c.cfg.InterBW > 0 {
			m.Inter.Bandwidth = c.cfg.InterBW
		}
	}
	m.Segment = c.op.Segment
	s := tune.Shape{N: c.size, Nodes: c.topo.NumNodes(), PerNode: c.topo.PerNode(), Consecutive: c.topo.Consecutive()}
	var host mesh.Figures // none where no engine runs the group's rows
	switch l := c.local; {
	case l != nil && l.whole:
		s.Mesh = tune.MeshShape{Whole: true, Ranks: len(l.ranks), SingleCopy: l.singleCopy, Chunk: l.chunk, Share: c.share}
		host = l.figures
	case l != nil && facts.level0 && s.PerNode == len(l.ranks) && slices.Equal(l.ranks, c.x.Hier.Local):
		s.Mesh = tune.MeshShape{Level0: true, Ranks: len(l.ranks), Chunk: facts.chunk, Share: c.share}
		host = facts.figures
	}
	// Frames between ranks on one machine are copies too: where ranks
	// share cores, they take turns at them as at the engine's.
	m.Intra.Bandwidth /= max(c.share, 1)
	m = m.WithHost(host)
	if l := c.local; l != nil {
		c.x.Node = l.engine
		c.op.Node = tune.NodeLegs(l.engine, &c.call)
	}
	c.tuner = tune.New(spec, m, s)
	c.tuner.SetMeasure(c.cfg.Tune == "measure" || (c.cfg.Tune == "auto" || c.cfg.Tune == "") && autoMeasures(c.crowded, severalHosts(hosts), c.local != nil))
	c.tuner.Warnf = c.log.Warnf
	if c.cfg.Debug >= config.Info {
		c.tuner.Logf = c.log.Infof
		c.log.Infof("topology %s, GOHCCL_ALGO=%s, shared memory: whole group %v, level0 %v, choices %s", c.topo, c.cfg.Algo, s.Mesh.Whole, s.Mesh.Level0, c.tuningMode())
		if inter.valid() {
			shared := "a link of its own per rank"
			if m.NodeBW > 0 {
				shared = fmt.Sprintf("%.3f GB/s per node, shared by its ranks", m.NodeBW/1e9)
			}
			c.log.Infof("inter-node link: latency %.1fus, bandwidth %.3f GB/s per rank, %s (%s)", m.Inter.Latency*1e6, m.Inter.Bandwidth/1e9, shared, inter.source)
		}
	}
	return nil
}

// tuningMode says how the tuner chooses, for the INFO log.
func (c *Comm) tuningMode() string {
	switch {
	case !c.tuner.Measuring():
		return "priced by the model"
	case c.cfg.Tune == "measure":
		return "measured (GOHCCL_TUNE=measure)"
	case c.crowded:
		return "measured (several hosts, one running more ranks than it has cores)"
	}
	return "measured (one host, a core per rank)"
}

// autoMeasures says where GOHCCL_TUNE=auto measures, from what each case
// showed (docs/algorithms.md, "Measured choices"):
//   - one host, a core per rank, with the shared-memory engine: measure
//     (without it, the model: what follows is about the engine's rows).
//     The engine's rows are priced
//     from a few figures of the host, and at 2 ranks on a Xeon VM they
//     ranked the one-shot, two-phase and single-copy schedules wrongly by
//     1.2-1.6x at 64 KiB-16 MiB; trials there are steady (a few percent)
//     and kept rows within 10% of the best.
//   - one host, more ranks than cores: the model. Ops move 2x with the
//     scheduler, more than the rows differ, and trials kept worse rows
//     about as often as better ones.
//   - several hosts, one of them crowded: measure; the links' prices do
//     not see descheduled ranks and missed by 2.3x (the seed's comparison).
//   - several hosts, a core per rank: the model, whose link figures the
//     probe measured at init.
func autoMeasures(crowded, severalHosts, engine bool) bool {
	if severalHosts {
		return crowded
	}
	return engine && !crowded
}

// severalHosts says whether the ranks run on more than one host.
func severalHosts(hosts []string) bool {
	for _, h := range hosts {
		if h != hosts[0] {
			return true
		}
	}
	return false
}

// nodesOf groups the ranks into nodes: by GOHCCL_RANKS_PER_NODE when set,
// else by host identity, else all on one.
func nodesOf(cfg config.Config, size int, hosts []string) *topo.Topology {
	switch {
	case cfg.RanksPerNode > 0:
		return topo.Blocked(size, cfg.RanksPerNode)
	case len(hosts) == size:
		return topo.FromHosts(hosts)
	}
	return topo.Blocked(size, size)
}

// FromMesh makes a communicator over an existing mesh (the in-process
// transport in tests). opt.Rank and opt.Size must match the mesh.
func FromMesh(mesh *transport.Mesh, opt Options) (*Comm, error) {
	if mesh.Rank() != opt.Rank || mesh.Size() != opt.Size {
		return nil, fmt.Errorf("%w: mesh is rank %d of %d, options say %d of %d", ErrInvalid, mesh.Rank(), mesh.Size(), opt.Rank, opt.Size)
	}
	if err := opt.Config.Validate(); err != nil {
		return nil, err
	}
	if opt.Timeout <= 0 {
		opt.Timeout = 30 * time.Minute
	}
	c := newComm(mesh, opt, "inproc", NewLogger(opt.Config.Debug, opt.Rank, opt.Size))
	if err := c.initTuning(opt.Hosts, meshFacts{}, interLink{}); err != nil {
		return nil, err
	}
	return c, nil
}

// Rank returns this rank.
func (c *Comm) Rank() int { return c.rank }

// Size returns the group size.
func (c *Comm) Size() int { return c.size }

// Describe returns a one-line summary for logs and the C ABI.
func (c *Comm) Describe() string {
	return fmt.Sprintf("gohccl comm %s rank %d of %d, links %s, buffer %d bytes (segment %d), reduce path %s",
		c.id, c.rank, c.size, c.mesh.Classes(), len(c.scratch), c.op.Segment, c.path.Name())
}

// Err returns the error that broke the communicator, or nil. A peer's abort
// frame breaks it too, even while no op of this rank was waiting.
func (c *Comm) Err() error {
	if p := c.broken.Load(); p != nil {
		return *p
	}
	if err := c.mesh.Matcher().Err(); err != nil {
		return c.breakBy(err)
	}
	return nil
}

// breakBy records err as what broke the communicator, unless something did
// first, and returns the error that did. It is apart from Err so that the
// pointer the record needs is allocated only on failure: taking the address
// of Err's own variable put it on the heap on every collective.
func (c *Comm) breakBy(err error) error {
	if c.broken.CompareAndSwap(nil, &err) {
		c.log.Warnf("communicator broken: %v", err)
	}
	return *c.broken.Load()
}

func (c *Comm) deadline(timeout time.Duration) time.Time {
	return c.deadlineFrom(time.Now(), timeout)
}

// deadlineFrom is deadline counted from now, a time the caller has read
// anyway (the flight recorder stamps the op's start with it).
func (c *Comm) deadlineFrom(now time.Time, timeout time.Duration) time.Time {
	if timeout <= 0 {
		timeout = c.timeout
	}
	return now.Add(timeout)
}

// noticeTimeout bounds how long a failing communicator spends telling its
// peers why (abort frames, docs/protocol.md): ample for one small frame into
// a socket whose peer drains it continuously, short enough that a peer that
// takes nothing delays the error only a little.
const noticeTimeout = 500 * time.Millisecond

// abortGrace is how long a failed op waits for a peer's abort frame when its
// own error is that peer's connection loss: a send may see the connection
// reset just before the receive side reads the frame that says why.
const abortGrace = 100 * time.Millisecond

// fail records err as the communicator's first error, sends every peer an
// abort frame with it and closes the mesh, so that every peer learns at once
// why this rank is gone instead of waiting out its timeout. The caller then
// drains the receives it had posted (see transport.Matcher.WaitClaimed), so
// that no transport writes into a caller's buffer after the op returns.
func (c *Comm) fail(err error) { c.failAt(err, 0) }

// failAt is fail from inside collective #seq.
func (c *Comm) failAt(err error, seq uint64) {
	if c.broken.CompareAndSwap(nil, &err) {
		c.log.Warnf("communicator broken: %v", err)
	}
	// Once: a concurrent failure (a send beside a collective) must not close
	// the links under the notices of the first.
	c.failOnce.Do(func() {
		first := c.Err()
		var pa *transport.PeerAbortError
		if !errors.As(first, &pa) && !c.closed.Load() {
			// A rank that fails because a peer aborted stays quiet: the
			// aborting rank told every peer itself.
			c.notifyPeers(seq, first)
		}
		c.mesh.Close(fmt.Errorf("%w: %v", transport.ErrClosed, first))
	})
	c.dumpOnFailure(c.Err())
}

// failFromMatcher is the matcher's OnFail: a mismatch it found on a frame's
// arrival, perhaps while no op of this rank runs. It breaks the
// communicator, tells the peers and closes the links as fail does, but
// leaves the flight recorder's dump to the op in progress or the next one,
// which records itself first.
func (c *Comm) failFromMatcher(err error) {
	if c.broken.CompareAndSwap(nil, &err) {
		c.log.Warnf("communicator broken: %v", err)
	}
	c.failOnce.Do(func() {
		if !c.closed.Load() {
			c.notifyPeers(0, err)
		}
		c.mesh.Close(fmt.Errorf("%w: %v", transport.ErrClosed, err))
	})
}

// notifyPeers sends every peer an abort frame carrying cause, concurrently
// and best effort: it returns when all are sent or noticeTimeout has passed.
// A send still waiting then (for a link another send holds) ends when the
// caller closes the mesh.
func (c *Comm) notifyPeers(seq uint64, cause error) {
	if c.size == 1 {
		return
	}
	h, text := transport.AbortFrame(seq, cause)
	deadline := time.Now().Add(noticeTimeout)
	sent := make(chan struct{}, c.size)
	for p := 0; p < c.size; p++ {
		if p == c.rank {
			continue
		}
		go func() {
			hp := h
			if err := c.mesh.Send(p, &hp, text, deadline); err != nil && c.cfg.Debug >= config.Info {
				c.log.Infof("could not tell rank %d why this communicator failed: %v", p, err)
			}
			sent <- struct{}{}
		}()
	}
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for n := 0; n < c.size-1; n++ {
		select {
		case <-sent:
		case <-timer.C:
			return
		}
	}
}

// explain adds to a failed collective's error what this rank knows about
// its cause: for a timeout, here or at the peer that aborted, which peers it
// had not heard from; for a lost connection, the peer's own reason if it
// sent an abort frame.
func (c *Comm) explain(err error) error {
	if merr := c.mesh.Matcher().Err(); errors.Is(merr, transport.ErrMismatch) && !errors.Is(err, transport.ErrMismatch) {
		// A mismatch found by the matcher (here or at the peer that
		// aborted) closed the links under the op: it is the cause.
		return fmt.Errorf("%w (this rank saw: %v)", merr, err)
	}
	var me *mesh.MismatchError
	if errors.As(err, &me) && me.Got.Seq != me.Want.Seq {
		return c.explainOrder(err, me)
	}
	var te *transport.RecvTimeoutError
	if errors.As(err, &te) {
		return fmt.Errorf("%w; %s", err, c.silence(te.Peer))
	}
	var pa *transport.PeerAbortError
	if errors.As(err, &pa) {
		if lpa := c.linkAbort(pa); lpa != nil {
			err = fmt.Errorf("%w (this rank saw: %v)", lpa, err)
		}
		if errors.Is(pa, transport.ErrTimeout) {
			// The peer's deadline passed first; the rank it names may
			// itself have waited for another, which only this rank knows.
			return fmt.Errorf("%w; on rank %d (this process): %s", err, c.rank, c.silence(transport.AnySource))
		}
		return err
	}
	if !errors.Is(err, transport.ErrPeerLost) {
		return err
	}
	m := c.mesh.Matcher()
	for start := time.Now(); m.Err() == nil && time.Since(start) < abortGrace; {
		time.Sleep(time.Millisecond)
	}
	if errors.As(m.Err(), &pa) {
		return fmt.Errorf("%w (this rank saw: %v)", pa, err)
	}
	return err
}

// settleBudget bounds how long a collective waits at its end for frames
// its local peers published before it (see settle): a frame is handed to
// the matcher within microseconds of its publication unless the receive
// goroutine was descheduled.
const settleBudget = 50 * time.Millisecond

// settle ends a successful collective on a host with shared memory: it
// lets the frames every local peer published before posting this op reach
// the matcher, and fails the op if one of them (or anything else) showed a
// mismatch. A rank that sent a rooted op's frames here and then ran the
// next op on the engine has thus been compared before that op returns.
// A peer's abort from a later op does not fail this one: that peer
// finished this op, so this rank's result is whole (the communicator is
// broken all the same, and the next op says so).
func (c *Comm) settle() error {
	for _, l := range c.local.settlers {
		l.Settle(settleBudget)
	}
	err := c.mesh.Matcher().Err()
	if !errors.Is(err, transport.ErrMismatch) {
		return nil
	}
	var pa *transport.PeerAbortError
	if errors.As(err, &pa) && pa.Seq > c.seq {
		return nil
	}
	return err
}

// linkAbort returns the abort frame of the peer that pa names, when pa is
// the shared-memory engine's record of that peer's failure and the frame
// says something else: the engine's record holds the peer engine's own
// words, the frame (sent over the links a moment later) its
// communicator's, which add what the engine could not know. nil if none
// arrives within three abortGraces: the peer may itself take one to
// complete its error (explainOrder) before it sends the frame.
func (c *Comm) linkAbort(pa *transport.PeerAbortError) *transport.PeerAbortError {
	m := c.mesh.Matcher()
	for start := time.Now(); time.Since(start) < 3*abortGrace; time.Sleep(time.Millisecond) {
		if merr := m.Err(); merr != nil {
			var lpa *transport.PeerAbortError
			if errors.As(merr, &lpa) && lpa != pa && lpa.Rank == pa.Rank && lpa.Cause != pa.Cause {
				return lpa
			}
			return nil
		}
	}
	return nil
}

// explainOrder completes a mismatch the shared-memory engine found between
// two sequence numbers: the peer was at another op than this rank, so the
// op each ran as the same number is elsewhere. A peer behind this rank
// (Got.Seq lower) ran as #Got.Seq what this rank remembers running then; a
// peer ahead sent its frames or announce of this op over the links, where
// the matcher names it within a moment.
func (c *Comm) explainOrder(err error, me *mesh.MismatchError) error {
	m := c.mesh.Matcher()
	if me.Got.Seq < me.Want.Seq {
		if fp, ok := m.Ran(me.Got.Seq); ok && fp != me.Got.Fingerprint {
			return fmt.Errorf("%w; this rank ran collective #%d as %s", err, me.Got.Seq, fp)
		}
		return err
	}
	for start := time.Now(); time.Since(start) < abortGrace; time.Sleep(time.Millisecond) {
		if merr := m.Err(); errors.Is(merr, transport.ErrMismatch) {
			return fmt.Errorf("%w (this rank also saw: %v)", merr, err)
		}
	}
	return err
}

// silence describes the peers the timed-out collective #c.seq waited for:
// the one whose receive expired and every one with a receive still posted
// or failed (by the abort that ended it), each with the last collective this
// rank heard from it. A receive of an earlier op never failed: that op would
// have broken the communicator.
func (c *Comm) silence(waited int) string {
	seen := make([]bool, c.size)
	var peers []int
	add := func(p int) {
		if p >= 0 && p < c.size && p != c.rank && !seen[p] {
			seen[p] = true
			peers = append(peers, p)
		}
	}
	add(waited)
	for i := range c.op.Recvs {
		if r := &c.op.Recvs[i]; r.Pending() || (r.Done() && r.Err() != nil) {
			add(r.Peer)
		}
	}
	slices.Sort(peers)
	m := c.mesh.Matcher()
	var silent, stalled []string
	for _, p := range peers {
		switch last := m.LastSeq(p); {
		case last == 0:
			silent = append(silent, fmt.Sprintf("rank %d (no collective frame from it yet)", p))
		case last < c.seq:
			silent = append(silent, fmt.Sprintf("rank %d (last heard from in #%d)", p, last))
		default:
			stalled = append(stalled, fmt.Sprintf("rank %d", p))
		}
	}
	var parts []string
	if len(silent) > 0 {
		parts = append(parts, fmt.Sprintf("not heard from in #%d: %s", c.seq, strings.Join(silent, ", ")))
	}
	if len(stalled) > 0 {
		parts = append(parts, fmt.Sprintf("%s sent frames of #%d but not the awaited one", strings.Join(stalled, ", "), c.seq))
	}
	if len(parts) == 0 {
		return "no peer was awaited"
	}
	return strings.Join(parts, "; ")
}

// Abort fails every op in progress and every later one.
func (c *Comm) Abort() {
	err := fmt.Errorf("%w: aborted by the application", transport.ErrClosed)
	c.broken.CompareAndSwap(nil, &err)
	c.mesh.Close(err)
}

// Close releases every link, goroutine and buffer. Ops still waiting fail.
func (c *Comm) Close() {
	if c.closed.Swap(true) {
		return
	}
	err := fmt.Errorf("%w: the communicator was destroyed", transport.ErrClosed)
	c.broken.CompareAndSwap(nil, &err)
	c.mesh.Close(err)
	c.mu.Lock()
	c.scratch, c.op.Scratch, c.op.Work = nil, nil, nil
	if c.local != nil {
		// The links are closed and no op runs (it would hold mu):
		// nothing touches the segment any more.
		c.local.close()
		c.local = nil
	}
	c.mu.Unlock()
	// Give the buffers back now: the scratch (GOHCCL_BUFFSIZE) and the
	// accumulation buffer are megabytes each, and in a Python process
	// that allocates little Go memory the next collection, and with it
	// their return to the kernel, can be many init/destroy cycles away
	// (tests/test_leaks.py saw RSS 9 MB up at cycle 55 of 100, flat after).
	// A destroy is rare; one forced collection of a small heap costs
	// about a millisecond.
	debug.FreeOSMemory()
	c.log.Infof("communicator %s closed", c.id)
}

// begin starts one collective: it takes the communicator's lock, checks its
// state, resolves the reduce kernels when withKernel (an unsupported pair
// fails with ErrInvalid before the sequence number advances), and stamps the
// op with the next sequence number. Every successful begin is paired with an
// end. A collective reads check, begin, choose, run, end, written out
// rather than with a closure, which would allocate on every call.
func (c *Comm) begin(fp transport.Fingerprint, timeout time.Duration, withKernel bool) error {
	c.mu.Lock()
	if err := c.open(fp, timeout, withKernel); err != nil {
		c.mu.Unlock()
		return err
	}
	return nil
}

// open is begin under the communicator's lock, which it leaves held.
func (c *Comm) open(fp transport.Fingerprint, timeout time.Duration, withKernel bool) error {
	if err := c.Err(); err != nil {
		c.refused(fp, err) // flight.go
		return fmt.Errorf("%w: %v", ErrBroken, err)
	}
	if withKernel {
		k, k3, err := c.path.Lookup(fp.DType, fp.Op)
		if err != nil {
			return fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		c.op.Kernel, c.op.Kernel3 = k, k3
	}
	c.seq++
	o := &c.op
	o.Stamp = transport.Header{Fingerprint: fp, Seq: c.seq}
	c.started = time.Now()
	o.Deadline = c.deadlineFrom(c.started, timeout)
	o.DType = fp.DType
	c.measured = false
	if c.cfg.Debug >= config.Trace {
		c.log.Tracef("#%d %s", c.seq, fp)
	}
	if err := c.mesh.Matcher().Begin(&o.Stamp); err != nil {
		// What arrived early for this op already shows a mismatch: it
		// fails as begun (recorded, then ended), before any choice.
		c.recordCollective(tune.Choice{})
		return c.close(err)
	}
	return nil
}

// end finishes the collective begun by begin. A failure becomes an error
// naming the op, its sequence number and this rank, and breaks the
// communicator. The last op of a trial (tune's measuring) is followed, on
// every rank alike, by the trial's agreement.
func (c *Comm) end(err error) error {
	defer c.mu.Unlock()
	if err = c.close(err); err != nil || !c.measured {
		return err
	}
	coll, bytes := c.measuredColl, c.measuredBytes
	if !c.tuner.Observe(coll, bytes, time.Since(c.started).Seconds()) {
		return nil
	}
	return c.agree(coll, bytes)
}

// close is end under the communicator's lock, without the trial.
func (c *Comm) close(err error) error {
	if err == nil && c.local != nil {
		err = c.settle()
	}
	if err == nil {
		c.flight.End(c.rec, false, nil)
		return nil
	}
	c.flight.End(c.rec, true, c.awaitedBy(err, c.op.Recvs))
	fp := c.op.Stamp.Fingerprint
	err = fmt.Errorf("%s #%d on rank %d failed: %w", fp.Kind, c.seq, c.rank, c.explain(err))
	c.failAt(err, c.seq)
	for i := range c.op.Recvs {
		c.mesh.Matcher().WaitClaimed(&c.op.Recvs[i])
	}
	return err
}

// agree ends the trial of coll at bytes that the op just ended completed:
// an all-reduce (max) of each rank's median time per candidate (whole
// nanoseconds: every rank gets the same figures), run with the model's
// choice as an op of its own, then the tuner keeps the fastest. Every rank
// runs it right after the same op, so the ranks' sequences stay alike.
func (c *Comm) agree(coll tune.Coll, bytes int) error {
	nanos := c.tuner.Timings(coll, bytes)
	buf := unsafe.Slice((*byte)(unsafe.Pointer(&nanos[0])), len(nanos)*8)
	fp := transport.Fingerprint{Kind: transport.KindAllReduce, DType: reduce.Int64, Op: reduce.Max, Count: uint64(len(nanos))}
	if err := c.open(fp, c.timeout, true); err != nil {
		return err
	}
	c.args = tune.Args{Buf: buf, Count: len(nanos)}
	c.choice = c.tuner.Modeled(tune.AllReduce, len(buf))
	c.recordCollective(c.choice)
	if err := c.close(c.run(c.choice)); err != nil {
		return err
	}
	c.tuner.Settle(coll, bytes, nanos)
	return nil
}
