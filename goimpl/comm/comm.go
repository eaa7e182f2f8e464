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
	"sync"
	"sync/atomic"
	"time"

	"github.com/gohccl/gohccl/goimpl/algo"
	"github.com/gohccl/gohccl/goimpl/config"
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

	broken atomic.Pointer[error]
	closed atomic.Bool
	p2p    p2pState

	// hosts is each rank's host identity; topo groups ranks into nodes by
	// it (or by GOHCCL_RANKS_PER_NODE); hier is this rank's two levels,
	// empty when the nodes differ in size; tuner picks the algorithms.
	hosts []string
	topo  *topo.Topology
	hier  algo.Hierarchy
	tuner *tune.Tuner
}

func newComm(mesh *transport.Mesh, opt Options, id string, log *Logger) *Comm {
	seg := min(int(opt.Config.BuffSize)/4, maxSegment) &^ 63
	c := &Comm{
		rank: opt.Rank, size: opt.Size, timeout: opt.Timeout, cfg: opt.Config,
		mesh: mesh, log: log, id: id,
		scratch: make([]byte, opt.Config.BuffSize),
	}
	c.op = algo.Op{Mesh: mesh, Scratch: c.scratch, Segment: seg,
		Recvs: make([]transport.Recv, 2*opt.Size+2)}
	c.p2p.init()
	return c
}

// initTuning parses GOHCCL_ALGO, groups the ranks into nodes and sets up
// the tuner. An unknown algorithm or malformed form fails the
// communicator's creation.
func (c *Comm) initTuning(hosts []string) error {
	spec, err := tune.ParseAlgo(c.cfg.Algo)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	c.hosts = hosts
	switch {
	case c.cfg.RanksPerNode > 0:
		c.topo = topo.Blocked(c.size, c.cfg.RanksPerNode)
	case len(hosts) == c.size:
		c.topo = topo.FromHosts(hosts)
	default:
		c.topo = topo.Blocked(c.size, c.size)
	}
	if l0, l1, err := c.topo.Levels(c.rank); err == nil {
		c.hier = algo.Hierarchy{Local: l0, Cross: l1}
	}
	m := tune.DefaultModel()
	if c.cfg.IntraBW > 0 { // set by config.Load; a literal Config keeps the defaults
		m.Intra = tune.Link{Latency: c.cfg.IntraLatency, Bandwidth: c.cfg.IntraBW}
		m.Inter = tune.Link{Latency: c.cfg.InterLatency, Bandwidth: c.cfg.InterBW}
	}
	m.Segment = c.op.Segment
	c.tuner = tune.New(spec, m, tune.Shape{N: c.size, Nodes: c.topo.NumNodes(), PerNode: c.topo.PerNode(),
		Consecutive: c.topo.Consecutive()})
	c.tuner.Warnf = c.log.Warnf
	if c.cfg.Debug >= config.Info {
		c.tuner.Logf = c.log.Infof
		c.log.Infof("topology %s, GOHCCL_ALGO=%s", c.topo, c.cfg.Algo)
	}
	return nil
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
	if err := c.initTuning(opt.Hosts); err != nil {
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
		c.id, c.rank, c.size, c.mesh.Classes(), len(c.scratch), c.op.Segment, reduce.ActivePath())
}

// Err returns the error that broke the communicator, or nil.
func (c *Comm) Err() error {
	if p := c.broken.Load(); p != nil {
		return *p
	}
	return nil
}

func (c *Comm) deadline(timeout time.Duration) time.Time {
	if timeout <= 0 {
		timeout = c.timeout
	}
	return time.Now().Add(timeout)
}

// fail records err as the communicator's first error and closes the mesh, so
// that every peer learns at once that this rank is gone instead of waiting
// out its timeout. The caller then drains the receives it had posted (see
// transport.Matcher.WaitClaimed), so that no transport writes into a
// caller's buffer after the op returns.
func (c *Comm) fail(err error) {
	if c.broken.CompareAndSwap(nil, &err) {
		c.log.Warnf("communicator broken: %v", err)
	}
	c.mesh.Close(fmt.Errorf("%w: %v", transport.ErrClosed, err))
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
	c.scratch, c.op.Scratch = nil, nil
	c.mu.Unlock()
	c.log.Infof("communicator %s closed", c.id)
}

// begin starts one collective: it takes the communicator's lock, checks its
// state, resolves the reduce kernels when withKernel (an unsupported pair
// fails with ErrInvalid before the sequence number advances), and stamps the
// op with the next sequence number. Every successful begin is paired with an
// end. Collectives are written as begin/schedule/end rather than with a
// closure, which would allocate on every call.
func (c *Comm) begin(fp transport.Fingerprint, timeout time.Duration, withKernel bool) (*algo.Op, error) {
	c.mu.Lock()
	if err := c.Err(); err != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %v", ErrBroken, err)
	}
	if withKernel {
		k, k3, err := reduce.Lookup(fp.DType, fp.Op)
		if err != nil {
			c.mu.Unlock()
			return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
		}
		c.op.Kernel, c.op.Kernel3 = k, k3
	}
	c.seq++
	o := &c.op
	o.Stamp = transport.Header{Fingerprint: fp, Seq: c.seq}
	o.Deadline = c.deadline(timeout)
	o.DType = fp.DType
	if c.cfg.Debug >= config.Trace {
		c.log.Tracef("#%d %s", c.seq, fp)
	}
	return o, nil
}

// end finishes the collective begun by begin. A failure becomes an error
// naming the op, its sequence number and this rank, and breaks the
// communicator.
func (c *Comm) end(err error) error {
	defer c.mu.Unlock()
	if err == nil {
		return nil
	}
	fp := c.op.Stamp.Fingerprint
	err = fmt.Errorf("%s #%d on rank %d failed: %w", fp.Kind, c.seq, c.rank, err)
	c.fail(err)
	for i := range c.op.Recvs {
		c.mesh.Matcher().WaitClaimed(&c.op.Recvs[i])
	}
	return err
}
