package mesh

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/shm"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// Call is what one collective brings: its stamp (fingerprint and sequence
// number, compared against every peer's), deadline, dtype, reduce kernels
// (nil for the ops that do not reduce) and the schedule to run it with. A
// zero Deadline means none.
type Call struct {
	Stamp    transport.Header
	Deadline time.Time
	DType    reduce.DType
	Kernel   reduce.Kernel
	Kernel3  reduce.Kernel3
	// Variant is the schedule: every rank must name the same one (a
	// chunk's stamp carries it, so ranks that differ fail as a mismatch).
	Variant Variant
}

// Variant names one of the engine's schedules for an operation. The engine
// never chooses: the caller (goimpl/tune's table) does, from their prices.
type Variant uint8

// The schedules. An operation accepts the variants its doc names; OneShot,
// the zero value, runs every operation through the region.
const (
	// OneShot: every rank publishes its input and reads every peer's
	// (all-reduce, reduce: each reduces everything it needs itself;
	// allgather, broadcast, reduce-scatter: their only region schedule).
	OneShot Variant = iota
	// TwoPhase: a reduce-scatter and an allgather fused chunk by chunk
	// (all-reduce, reduce): fewer bytes read across cores from three ranks
	// up, two waits per chunk instead of one.
	TwoPhase
	// SingleCopy: two ranks read each other's message straight out of the
	// peer's process (all-reduce, allgather, broadcast); needs
	// cross-memory attach between them (SetSingleCopy).
	SingleCopy
	// Eager: a broadcast of at most EagerBytes through the root's own
	// slots, with no end-of-op round. A reader compares the root's stamp
	// and copies; the root compares the readers' stamps later (verify),
	// so it runs up to stamps-1 chunks ahead of the slowest reader and
	// learns of a rank that disagreed at its next operation that is not
	// an eager broadcast, or within stamps chunks.
	Eager
	numVariants
)

var variantNames = [numVariants]string{"oneshot", "twophase", "singlecopy", "eager"}

func (v Variant) String() string {
	if v < numVariants {
		return variantNames[v]
	}
	return fmt.Sprintf("variant(%d)", uint8(v))
}

// Engine is one local rank's side of the region: it runs collectives with
// the other local ranks on the calling goroutine. Its operations must be
// called one at a time, in the same order on every local rank; Close may be
// called at any time from any goroutine.
type Engine struct {
	region []byte
	lay    layout
	opt    Options
	n, me  int

	ready, free []*shm.Counter
	// seenFree[j] is the last value read from free[j]: a claim that it
	// already covers reads nothing shared.
	seenFree []uint64
	// checked[j] is set once peer j's info record matched this rank's.
	checked []bool

	// k is the global chunk sequence: chunks consumed by every operation
	// so far, identical on every local rank because every rank derives each
	// operation's chunk count from the same arguments.
	k uint64

	// done is the chunks this rank has finished. held is a queue of the
	// eager chunks it rooted and has not verified (heldLen of them from
	// heldHead): its free counter stays at the first of them.
	done              uint64
	held              [stamps]uint64
	heldHead, heldLen int

	names []int

	stop   atomic.Pointer[func() error]
	stopFn func() error // e.check, bound once so that waits do not allocate

	closed atomic.Bool
	busy   atomic.Int32
	broken error // the first error after an operation began; every later call returns it

	// cma says the ranks found that they may read each other's memory
	// (SetSingleCopy); scratch holds the peer's bytes a single-copy
	// all-reduce reads, and readPeer reads the peer's memory
	// (process_vm_readv; the tests refuse it).
	cma      bool
	scratch  []byte
	readPeer func(pid int, dst []byte, addr uintptr) error

	// The operation in progress.
	call     *Call
	deadline time.Time
	want     [transport.HeaderSize]byte // this chunk's stamp, as every rank must publish it
	chunk    int                        // index of the chunk within the operation, for messages
	chunks   int
	// waitC and waitV are the counter and value being waited for, so that
	// check does not fail a wait whose value arrived just before a peer
	// closed.
	waitC *shm.Counter
	waitV uint64
}

// info record layout (in a rank's info line), all little-endian.
const (
	infoMagic   = 0 // uint64
	infoN       = 8 // uint32
	infoDepth   = 12
	infoPiece   = 16
	infoRank    = 20
	infoState   = 24                 // uint32, atomic: stateAttached, stateFailed, stateClosed
	infoText    = 28                 // uint32: bytes of failure text in the text lines
	infoClass   = 32                 // uint32: the failure's class (transport.AbortClass)
	infoVersion = 0x6d65736876320000 // "meshv2\0\0"
)

const (
	stateAttached = 1
	stateFailed   = 2
	stateClosed   = 3
)

// farFuture stands in for a Call without a deadline.
var farFuture = time.Unix(0, math.MaxInt64)

// Attach returns local rank me's engine over region, which all n local
// ranks map, the creator zeroed before any rank attached, and which is
// RegionSize(n, budget, o) bytes, 8-byte aligned (a mapping is
// page-aligned). Attach writes only rank me's own records. Zero fields of o
// take DefaultOptions' values.
func Attach(region []byte, n, me, budget int, o Options) (*Engine, error) {
	o = o.normal()
	switch {
	case n < 1 || me < 0 || me >= n:
		return nil, fmt.Errorf("mesh: local rank %d of %d", me, n)
	case len(region) != RegionSize(n, budget, o):
		return nil, fmt.Errorf("mesh: region is %d bytes; %d local ranks with a %d-byte budget need %d", len(region), n, budget, RegionSize(n, budget, o))
	case uintptr(unsafe.Pointer(unsafe.SliceData(region)))%8 != 0:
		return nil, fmt.Errorf("mesh: region is not 8-byte aligned")
	}
	e := &Engine{region: region, lay: newLayout(n, budget, o.Chunk), opt: o, n: n, me: me,
		ready: make([]*shm.Counter, n), free: make([]*shm.Counter, n),
		seenFree: make([]uint64, n), checked: make([]bool, n), readPeer: processVMRead}
	for r := range n {
		e.ready[r] = shm.CounterAt(region, e.lay.ctl(r, lineReady))
		e.free[r] = shm.CounterAt(region, e.lay.ctl(r, lineFree))
	}
	e.stopFn = e.check
	err := func() (err error) {
		shm.Guard()
		defer func() { err = shm.Recovered(recover(), err) }()
		info := e.info(me)
		binary.LittleEndian.PutUint64(info[infoMagic:], infoVersion)
		binary.LittleEndian.PutUint32(info[infoN:], uint32(n))
		binary.LittleEndian.PutUint32(info[infoDepth:], depth)
		binary.LittleEndian.PutUint32(info[infoPiece:], uint32(e.lay.piece))
		binary.LittleEndian.PutUint32(info[infoRank:], uint32(me))
		e.state(me).Store(stateAttached)
		return nil
	}()
	if err != nil {
		return nil, err
	}
	return e, nil
}

// SetRanks names the local ranks in messages: local rank i is called rank
// ranks[i] (the communicator's numbering). Call it before the first
// operation. Without it, messages say "local rank i".
func (e *Engine) SetRanks(ranks []int) error {
	if len(ranks) != e.n {
		return fmt.Errorf("mesh: %d rank names for %d local ranks", len(ranks), e.n)
	}
	e.names = append([]int(nil), ranks...)
	return nil
}

// SetStop installs a check that waits call while they sleep (not while
// they spin): once it returns an error, the waiting operation fails with
// it. The communicator passes its broken/aborted state here.
func (e *Engine) SetStop(stop func() error) {
	if stop == nil {
		e.stop.Store(nil)
		return
	}
	e.stop.Store(&stop)
}

// Close makes every later call fail, wakes this rank's sleepers, marks this
// rank closed for the peers (their waits on it fail instead of running to
// their deadline) and returns once no operation of this engine is running.
// It never touches the region after it returns, so the caller may unmap it.
func (e *Engine) Close() {
	first := !e.closed.Swap(true)
	for i := 0; ; i++ {
		if first && i == 0 {
			func() {
				shm.Guard()
				defer func() { _ = shm.Recovered(recover(), nil) }()
				e.state(e.me).Store(stateClosed)
			}()
		}
		if e.busy.Load() == 0 {
			return
		}
		if i%64 == 0 {
			e.wakeAll()
		}
		time.Sleep(50 * time.Microsecond)
	}
}

// wakeAll wakes every sleeper on any counter of the region: this rank's
// (sleeping on its peers' counters) and the peers' (sleeping on this
// rank's), so that each looks at its stop condition.
func (e *Engine) wakeAll() {
	shm.Guard()
	defer func() { _ = shm.Recovered(recover(), nil) }()
	for r := range e.n {
		e.ready[r].Wake()
		e.free[r].Wake()
	}
}

// ErrClosed-style failures name the engine's own state.
var errClosed = fmt.Errorf("%w: the shared-memory engine was closed", transport.ErrClosed)

// errBusy reports two operations at once on one engine: a caller bug.
var errBusy = errors.New("mesh: an operation is already running on this engine (operations must be issued one at a time)")

// begin checks that an operation may start and records it. Every exported
// operation pairs it with a deferred end.
func (e *Engine) begin(c *Call) error {
	if e.busy.Add(1) != 1 {
		e.busy.Add(-1)
		return errBusy
	}
	if e.closed.Load() {
		e.busy.Add(-1)
		return errClosed
	}
	if e.broken != nil {
		e.busy.Add(-1)
		return e.broken
	}
	e.call = c
	e.deadline = c.Deadline
	if e.deadline.IsZero() {
		e.deadline = farFuture
	}
	return nil
}

// end finishes an operation: a memory fault becomes an error, and any error
// breaks the engine (its counters are no longer in step with the peers'),
// which it tells the peers through its state. v is recover()'s value.
func (e *Engine) end(v any, err error) error {
	err = shm.Recovered(v, err)
	if err != nil && e.broken == nil {
		e.broken = err
		func() {
			defer func() { _ = shm.Recovered(recover(), nil) }()
			o := e.lay.ctl(e.me, lineText)
			n := copy(e.region[o:o+textLines*lineSize], err.Error())
			binary.LittleEndian.PutUint32(e.info(e.me)[infoText:], uint32(n))
			binary.LittleEndian.PutUint32(e.info(e.me)[infoClass:], uint32(transport.AbortClass(err)))
			e.state(e.me).Store(stateFailed)
		}()
		e.wakeAll()
	}
	e.call = nil
	e.busy.Add(-1)
	return err
}

// run is the frame of every exported operation: begin, a memory fault on
// the segment turned into an error (shm.Guard, end), then the op. Alone
// (one local rank) only alone runs, if given; with no data (empty) the
// ranks only meet (barrier, under schedule s); otherwise body runs.
func (e *Engine) run(c *Call, s schedule, empty bool, alone func(), body func() error) (err error) {
	if err := e.begin(c); err != nil {
		return err
	}
	shm.Guard()
	defer func() { err = e.end(recover(), err) }()
	switch {
	case e.n == 1:
		if alone != nil {
			alone()
		}
		return nil
	case e.heldLen > 0 && (s != schedBroadcastEager || empty):
		// An operation that waits for its peers anyway verifies first
		// what this rank's eager broadcasts left to verify.
		if err := e.verify(e.k); err != nil {
			return err
		}
	}
	if empty {
		return e.barrier(s)
	}
	return body()
}

// step enters chunk i of the running operation and returns its sequence
// number k and the buffer b it uses.
func (e *Engine) step(i int) (k uint64, b int) {
	k = e.k + uint64(i)
	e.chunk = i
	return k, int(k % depth)
}

// checkRoot validates a rooted operation's root.
func (e *Engine) checkRoot(c *Call, root int) error {
	if root < 0 || root >= e.n {
		return fmt.Errorf("mesh: %s: root %d is not a local rank (0..%d)", describeOp(&c.Stamp), root, e.n-1)
	}
	return nil
}

// check is the stop condition of every wait: this engine closed, the
// communicator's stop, or a peer that failed or closed.
func (e *Engine) check() error {
	if e.waitC != nil && e.waitC.Load() >= e.waitV {
		return nil
	}
	if e.closed.Load() {
		return errClosed
	}
	if p := e.stop.Load(); p != nil {
		if err := (*p)(); err != nil {
			return err
		}
	}
	for r := range e.n {
		if r == e.me {
			continue
		}
		switch e.state(r).Load() {
		case stateFailed:
			class := transport.AbortClassOf(uint64(binary.LittleEndian.Uint32(e.info(r)[infoClass:])))
			return &transport.PeerAbortError{Rank: e.name(r), Cause: e.failure(r), Class: class}
		case stateClosed:
			return fmt.Errorf("%w: %s closed its communicator", transport.ErrPeerLost, e.who(r))
		}
	}
	return nil
}

// failure returns the text failed peer r left, made printable: it comes
// from another process and is shown to users.
func (e *Engine) failure(r int) string {
	n := min(int(binary.LittleEndian.Uint32(e.info(r)[infoText:])), textLines*lineSize)
	o := e.lay.ctl(r, lineText)
	text := strings.Map(func(c rune) rune {
		if c < ' ' || c == utf8.RuneError {
			return '?'
		}
		return c
	}, strings.ToValidUTF8(string(e.region[o:o+n]), "?"))
	if text == "" {
		text = "(no reason given)"
	}
	return text
}

func (e *Engine) info(r int) []byte {
	o := e.lay.ctl(r, lineInfo)
	return e.region[o : o+lineSize]
}

func (e *Engine) state(r int) *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&e.info(r)[infoState]))
}

// checkInfo compares peer j's layout with this rank's, once: ranks that
// computed different layouts would read each other's bytes in the wrong
// places.
func (e *Engine) checkInfo(j int) error {
	info, mine := e.info(j), e.info(e.me)
	if string(info[:infoRank]) == string(mine[:infoRank]) && binary.LittleEndian.Uint32(info[infoRank:]) == uint32(j) {
		e.checked[j] = true
		return nil
	}
	return fmt.Errorf("%w: %s attached to the shared region with layout %s; this rank (%s) has %s",
		transport.ErrProtocol, e.who(j), describeInfo(info), e.who(e.me), describeInfo(mine))
}

func describeInfo(b []byte) string {
	if binary.LittleEndian.Uint64(b[infoMagic:]) != infoVersion {
		return fmt.Sprintf("(unknown record %x)", b[:infoState])
	}
	return fmt.Sprintf("(%d local ranks, %d buffers of %d-byte pieces, local rank %d)",
		binary.LittleEndian.Uint32(b[infoN:]), binary.LittleEndian.Uint32(b[infoDepth:]),
		binary.LittleEndian.Uint32(b[infoPiece:]), binary.LittleEndian.Uint32(b[infoRank:]))
}

// who names local rank r in messages.
func (e *Engine) who(r int) string {
	if e.names != nil {
		s := fmt.Sprintf("rank %d", e.names[r])
		if r == e.me {
			s += " (this process)"
		}
		return s
	}
	s := fmt.Sprintf("local rank %d", r)
	if r == e.me {
		s += " (this process)"
	}
	return s
}

// checkVariant refuses a variant the operation does not have.
func (e *Engine) checkVariant(c *Call, ok ...Variant) error {
	for _, v := range ok {
		if c.Variant == v {
			return nil
		}
	}
	return fmt.Errorf("mesh: %s: the operation has no %s schedule", describeOp(&c.Stamp), c.Variant)
}

// Options returns the engine's tunables, the defaults filled in.
func (e *Engine) Options() Options { return e.opt }
