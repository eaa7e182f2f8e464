// Package shm carries frames between two ranks of one host through shared
// memory: each direction of a pair is a single-producer single-consumer
// ring of bytes in a region every local rank maps (see layout.go), and a
// frame is the transport.Header followed by its payload, written into the
// ring as one byte stream.
//
// The sender copies header and payload straight into the ring on the
// caller's goroutine and publishes its tail counter; a frame larger than
// the ring streams through it in pieces while the sender waits for room.
// One receive goroutine per incoming ring waits on that tail (spin, then
// futex: the goimpl/shm wait policy), decodes each header and copies the
// payload straight into the receive the Matcher hands out, or into a stash
// buffer. A sender need not wait for the peer's program to reach its
// receive: the goroutine keeps frames that arrive early, up to the
// matcher's early-frame limit per peer (GOHCCL_EARLY_BYTES); past it, it
// holds the next frame's header and stops draining the ring until that
// frame's receive is posted, so the ring fills and the sender waits for
// room, as TCP's flow control holds a sender back.
//
// Nothing read from the region is trusted: headers are decoded with every
// check, counters must stay inside the ring, and a fault on a truncated
// segment (SIGBUS) becomes an error. A peer that closes its link sets a
// flag in the ring and wakes any sleeper; one that is killed is noticed
// through its pid (liveness.go), or else at the op's deadline.
package shm

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	shmem "github.com/gohccl/gohccl/goimpl/shm"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// livenessEvery spaces the checks that an idle peer's process still runs:
// they read /proc (a few microseconds); a death is noticed within about
// twice this long, the receive goroutine's futex sleeps being as long.
// Those sleeps are this long and not shmem.SleepSlice because each one
// costs the process a sysmon retake: a receive goroutine on an idle link
// waking every 10 ms kept sysmon at its fastest tick and made a 2-rank
// 4 KiB all-reduce through torch 10.1-10.7 us instead of 7.4-8.4.
const livenessEvery = 100 * time.Millisecond

// forever is the deadline of the receive goroutine's waits: it waits for
// the next frame until the link closes.
var forever = time.Now().Add(100 * 365 * 24 * time.Hour)

// Link is one rank's shared-memory link to one peer of its host.
type Link struct {
	peer     int // the peer's communicator rank
	m        *transport.Matcher
	out, in  ring // this rank to the peer, the peer to this rank
	self     procIdentity
	peerSlot *procSlot
	// wait is the communicator's wait policy.
	wait *shmem.Policy

	closed atomic.Bool
	// lost is why the receive side stopped when the peer went away or
	// sent garbage; later sends fail with it.
	lost atomic.Pointer[error]
	// gone is why another transport says the peer's process ended
	// (PeerGone); the receive goroutine stops on it once it has taken
	// what the peer published.
	gone atomic.Pointer[error]
	done chan struct{}
	// arrived is the in ring's position after the last frame the receive
	// goroutine has handed to the matcher (Arrive, or Stash), for Settle.
	arrived atomic.Uint64

	wmu sync.Mutex
	tx  sender   // guarded by wmu
	rx  receiver // the receive goroutine's own
}

// sender is the writing end of the out ring.
type sender struct {
	pos       uint64 // written up to: the truth about tail
	published uint64 // tail as last stored
	headSeen  uint64 // head as last loaded
	// broken is set once a frame was cut off half-written: the stream can
	// not go on, and every later send fails with it.
	broken error
	stop   func() error
}

// receiver is the reading end of the in ring.
type receiver struct {
	pos       uint64 // consumed up to: the truth about head
	published uint64 // head as last stored
	tailSeen  uint64 // tail as last loaded
	inFrame   bool   // a header was read and its payload is not yet
	claimed   *transport.Recv
	lastCheck time.Time
	proc      procReader
	stop      func() error
}

// Attach builds this rank's links over region (the same bytes, mapped by
// every local rank; zeroed by the creator before anyone attaches). ranks[i]
// is the communicator rank of local rank i; me is this rank's local index.
// It returns links indexed by local index (nil at me), each delivering the
// frames it receives to m with the peer's communicator rank, and starts one
// receive goroutine per incoming ring. Every local rank must pass the same
// ranks and ringBytes; a region laid out differently is refused. wait is
// how the links wait for room and for frames.
func Attach(region []byte, ranks []int, me int, ringBytes int, m *transport.Matcher, wait shmem.Policy) ([]transport.Link, error) {
	n := len(ranks)
	switch {
	case n < 1 || n > maxLocal:
		return nil, fmt.Errorf("shared-memory links among %d local ranks: want 1 to %d", n, maxLocal)
	case me < 0 || me >= n:
		return nil, fmt.Errorf("shared-memory links: local index %d outside the %d local ranks", me, n)
	case m == nil:
		return nil, errors.New("shared-memory links: no matcher")
	case len(region) < RegionSize(n, ringBytes):
		return nil, fmt.Errorf("shared-memory region of %d bytes is too small for %d local ranks with %d-byte rings (need %d)",
			len(region), n, ringBytes, RegionSize(n, ringBytes))
	case uintptr(unsafe.Pointer(unsafe.SliceData(region)))%8 != 0:
		return nil, errors.New("shared-memory region is not 8-byte aligned")
	}
	seen := make(map[int]int, n)
	for i, r := range ranks {
		if r < 0 {
			return nil, fmt.Errorf("shared-memory links: local rank %d has communicator rank %d", i, r)
		}
		if j, dup := seen[r]; dup {
			return nil, fmt.Errorf("shared-memory links: local ranks %d and %d are both communicator rank %d", j, i, r)
		}
		seen[r] = i
	}
	capBytes := ringCap(ringBytes)
	self := selfIdentity()
	var err error
	if ferr := guarded(func() {
		if err = checkLayout(region, n, capBytes); err == nil {
			at[procSlot](region, line*(1+me)).publish(self)
		}
	}); ferr != nil {
		return nil, ferr
	}
	if err != nil {
		return nil, err
	}
	links := make([]transport.Link, n)
	all := make([]*Link, 0, n-1)
	for p := range n {
		if p == me {
			continue
		}
		l := &Link{
			peer:     ranks[p],
			m:        m,
			out:      ringAt(region, n, me, p, capBytes),
			in:       ringAt(region, n, p, me, capBytes),
			self:     self,
			peerSlot: at[procSlot](region, line*(1+p)),
			wait:     &wait,
			done:     make(chan struct{}),
		}
		l.tx.stop = l.sendStop
		l.rx.stop = l.receiveStop
		links[p] = l
		all = append(all, l)
	}
	for _, l := range all {
		go l.receive()
	}
	return links, nil
}

// Class implements transport.Link.
func (l *Link) Class() string { return "shm" }

// Send implements transport.Link: it returns once header and payload are
// in the ring. It waits while the ring is full, until deadline (none when
// zero).
func (l *Link) Send(h *transport.Header, payload []byte, deadline time.Time) (err error) {
	if len(payload) != int(h.Len) {
		return fmt.Errorf("internal: frame header says %d bytes, payload has %d", h.Len, len(payload))
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	shmem.Guard()
	defer func() {
		if v := recover(); v != nil {
			err = l.breakSend(fmt.Errorf("%w: rank %d: %v", transport.ErrPeerLost, l.peer, shmem.Recovered(v, nil)))
		}
	}()
	if err := l.sendable(); err != nil { // reads the ring's flags: guarded too
		return err
	}
	if deadline.IsZero() {
		deadline = forever
	}
	return l.send(h, payload, deadline)
}

// sendable reports why the link cannot take a frame, if it cannot.
func (l *Link) sendable() error {
	if l.closed.Load() {
		return fmt.Errorf("%w: the link to rank %d is closed", transport.ErrClosed, l.peer)
	}
	if p := l.lost.Load(); p != nil {
		return *p
	}
	if l.out.closedBy(receiverClosed) {
		return fmt.Errorf("%w: rank %d closed its shared-memory link", transport.ErrPeerLost, l.peer)
	}
	return l.tx.broken
}

// sendStop is the stop condition of a sender's waits.
func (l *Link) sendStop() error {
	if err := l.sendable(); err != nil {
		return err
	}
	// A head that went backwards never satisfies a wait: catch it here.
	// (Not in sendable: the head's line changes with every frame the peer
	// takes, and a send that has room needs no look at it.)
	if h := l.out.head.Load(); h < l.tx.headSeen {
		return l.loadHead()
	}
	return nil
}

// send writes one frame in one pass: the header, then the payload in
// pieces, each copied straight from the caller's memory into the ring.
func (l *Link) send(h *transport.Header, payload []byte, deadline time.Time) error {
	s := &l.tx
	if _, err := l.reserve(transport.HeaderSize, deadline); err != nil {
		return err // nothing written: the stream is intact
	}
	var hb [transport.HeaderSize]byte
	h.Encode(hb[:])
	l.out.put(s.pos, hb[:])
	s.pos += transport.HeaderSize
	for len(payload) > 0 {
		want := min(uint64(len(payload)), l.out.piece)
		space, err := l.reserve(want, deadline)
		if err != nil {
			return l.breakSend(err)
		}
		n := min(space, want)
		l.out.put(s.pos, payload[:n])
		s.pos += n
		payload = payload[n:]
		if s.pos-s.published >= l.out.piece {
			l.publishTail()
		}
	}
	l.publishTail()
	return nil
}

// reserve waits until the ring has room for need more bytes and returns
// the room.
func (l *Link) reserve(need uint64, deadline time.Time) (uint64, error) {
	s := &l.tx
	if space := l.out.cap - (s.pos - s.headSeen); space >= need {
		return space, nil
	}
	if err := l.loadHead(); err != nil {
		return 0, err
	}
	if space := l.out.cap - (s.pos - s.headSeen); space >= need {
		return space, nil
	}
	// The receiver may be waiting for what this frame wrote so far.
	l.publishTail()
	for {
		werr := waitAtLeast(l.out.head, s.pos+need-l.out.cap, deadline, s.stop, shmem.SleepSlice, l.wait)
		if err := l.loadHead(); err != nil {
			return 0, err
		}
		if space := l.out.cap - (s.pos - s.headSeen); space >= need {
			return space, nil
		}
		if errors.Is(werr, shmem.ErrDeadline) {
			return 0, fmt.Errorf("%w: rank %d did not take the data in time (its shared-memory ring stayed full)", transport.ErrTimeout, l.peer)
		}
		if werr != nil {
			return 0, werr
		}
	}
}

// loadHead reads the receiver's head, which must lie between the last one
// seen and what this side wrote.
func (l *Link) loadHead() error {
	s := &l.tx
	h := l.out.head.Load()
	if h < s.headSeen || h > s.pos {
		return fmt.Errorf("%w: rank %d corrupted the shared-memory ring to it: consumed position %d outside [%d, %d]",
			transport.ErrProtocol, l.peer, h, s.headSeen, s.pos)
	}
	s.headSeen = h
	return nil
}

func (l *Link) publishTail() {
	if l.tx.pos != l.tx.published {
		l.out.tail.Store(l.tx.pos)
		l.tx.published = l.tx.pos
	}
}

// breakSend records that a frame was cut off and closes the out ring, so
// that the peer reports it rather than waiting for the rest.
func (l *Link) breakSend(err error) error {
	if l.tx.broken == nil {
		l.tx.broken = fmt.Errorf("an earlier frame to rank %d was cut off: %w", l.peer, err)
		guarded(func() { l.out.close(senderClosed) })
	}
	return err
}

// Close implements transport.Link. It marks both rings closed, so that the
// peer's sends and receives fail at once, stops the receive goroutine and
// waits for a send in progress to return; the region is not touched after.
func (l *Link) Close() error {
	var err error
	if !l.closed.Swap(true) {
		err = guarded(func() {
			l.out.close(senderClosed)
			l.in.close(receiverClosed)
		})
		l.m.Wake() // a receive goroutine holding back an early frame returns
	}
	<-l.done
	l.wmu.Lock()
	l.wmu.Unlock() //nolint:staticcheck // an empty critical section: waits out a Send in progress
	return err
}

// receive is the receive goroutine: it hands every frame to the matcher
// until the link closes or the peer is gone, then fails the peer's
// receives with the reason.
func (l *Link) receive() {
	defer close(l.done)
	err := l.receiveFrames()
	if !l.closed.Load() {
		// As a socket would close: the peer's sends and receives fail
		// now, not at their deadline.
		l.lost.Store(&err)
		guarded(func() {
			l.in.close(receiverClosed)
			l.out.close(senderClosed)
		})
	}
	if r := l.rx.claimed; r != nil {
		l.rx.claimed = nil
		l.m.Complete(r, err)
	}
	l.m.Fail(l.peer, err)
}

func (l *Link) receiveFrames() (err error) {
	shmem.Guard()
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%w: rank %d: %v", transport.ErrPeerLost, l.peer, shmem.Recovered(v, nil))
		}
	}()
	rx := &l.rx
	var hb [transport.HeaderSize]byte
	var h transport.Header
	for {
		rx.inFrame = false
		if err := l.await(transport.HeaderSize); err != nil {
			return err
		}
		l.in.get(rx.pos, hb[:])
		rx.pos += transport.HeaderSize
		rx.inFrame = true
		if err := h.Decode(hb[:]); err != nil {
			return fmt.Errorf("rank %d sent a corrupt frame over shared memory: %w: %v", l.peer, transport.ErrProtocol, err)
		}
		dst, r, discard := l.m.ArriveBounded(l.peer, &h, l.closed.Load)
		if r != nil || discard {
			l.arrived.Store(rx.pos + uint64(h.Len))
		}
		switch {
		case r != nil:
			rx.claimed = r
			if len(dst) != int(h.Len) {
				return fmt.Errorf("internal: a %d-byte receive matched a %d-byte frame from rank %d", len(dst), h.Len, l.peer)
			}
			if err := l.stream(dst, uint64(h.Len)); err != nil {
				return err
			}
			rx.claimed = nil
			l.m.Complete(r, nil)
		case discard:
			if err := l.stream(nil, uint64(h.Len)); err != nil {
				return err
			}
		default:
			buf := l.m.StashBuffer(int(h.Len))
			if err := l.stream(buf, uint64(h.Len)); err != nil {
				return err
			}
			l.m.Stash(l.peer, &h, buf)
			l.arrived.Store(rx.pos)
		}
	}
}

// Settle waits, for at most budget, until every frame the peer had begun to
// publish when it was called has been through the matcher, which compares
// it with this rank's ops. A collective that the peer posted on the
// shared-memory engine after sending a frame here (a rooted op it ran with
// another root) could otherwise end before its frame is looked at. It
// returns at once when the ring holds nothing new, and never touches the
// region once the link is closed. A frame the matcher holds back (the
// peer's early frames are at their limit, Matcher.Holding) has been
// compared, and it and every frame behind it belong to ops this rank has
// not begun: it returns then too, or it would wait out its budget at the
// end of every op while the peer runs that far ahead.
func (l *Link) Settle(budget time.Duration) {
	if l.closed.Load() || l.lost.Load() != nil {
		return
	}
	t := l.in.tail.Load()
	if l.arrived.Load() >= t {
		return
	}
	deadline := time.Now().Add(budget)
	for i := 0; l.arrived.Load() < t; i++ {
		if l.closed.Load() || l.lost.Load() != nil || time.Now().After(deadline) || l.m.Holding(l.peer) {
			return
		}
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(20 * time.Microsecond)
		}
	}
}

// stream consumes n payload bytes, copying them into dst unless it is nil.
func (l *Link) stream(dst []byte, n uint64) error {
	rx := &l.rx
	for n > 0 {
		if err := l.await(1); err != nil {
			return err
		}
		k := min(rx.tailSeen-rx.pos, n, l.in.piece)
		if dst != nil {
			l.in.get(rx.pos, dst[:k])
			dst = dst[k:]
		}
		rx.pos += k
		n -= k
		if rx.pos-rx.published >= l.in.piece {
			l.publishHead()
		}
	}
	return nil
}

// await waits until need bytes past the consumed position are published.
func (l *Link) await(need uint64) error {
	rx := &l.rx
	if rx.tailSeen-rx.pos >= need {
		return nil
	}
	if err := l.loadTail(); err != nil {
		return err
	}
	if rx.tailSeen-rx.pos >= need {
		return nil
	}
	// Hand the room back before sleeping: the sender may be waiting for it.
	l.publishHead()
	for {
		werr := waitAtLeast(l.in.tail, rx.pos+need, forever, rx.stop, livenessEvery, l.wait)
		// Even when stopped, take what the peer published before it closed.
		if err := l.loadTail(); err != nil {
			return err
		}
		if rx.tailSeen-rx.pos >= need {
			return nil
		}
		if werr != nil {
			return werr
		}
	}
}

// loadTail reads the sender's tail, which must lie between the last one
// seen and a full ring past what this side consumed.
func (l *Link) loadTail() error {
	rx := &l.rx
	t := l.in.tail.Load()
	if t < rx.tailSeen || t-rx.pos > l.in.cap {
		return fmt.Errorf("rank %d sent a corrupt frame over shared memory: %w: published position %d outside [%d, %d]",
			l.peer, transport.ErrProtocol, t, rx.tailSeen, rx.pos+l.in.cap)
	}
	rx.tailSeen = t
	return nil
}

func (l *Link) publishHead() {
	if l.rx.pos != l.rx.published {
		l.in.head.Store(l.rx.pos)
		l.rx.published = l.rx.pos
	}
}

// PeerGone tells the link that the peer's process has ended or closed its
// side (its socket to this rank closed): the receive goroutine delivers
// what the peer published before, then fails the peer's receives with err,
// instead of at its next liveness check. Failing them at once, from the
// socket's side, would lose frames still in the ring: a peer that sends
// and then exits has done nothing wrong.
func (l *Link) PeerGone(err error) {
	l.gone.CompareAndSwap(nil, &err)
	guarded(func() { l.in.tail.Wake() })
}

// receiveStop is the stop condition of the receive goroutine's waits.
func (l *Link) receiveStop() error {
	if l.closed.Load() {
		return fmt.Errorf("%w: the link to rank %d was closed", transport.ErrClosed, l.peer)
	}
	if l.in.closedBy(senderClosed) {
		if l.rx.inFrame {
			return fmt.Errorf("%w: rank %d closed its shared-memory link in the middle of a frame", transport.ErrPeerLost, l.peer)
		}
		return fmt.Errorf("%w: rank %d closed its shared-memory link", transport.ErrPeerLost, l.peer)
	}
	if p := l.gone.Load(); p != nil {
		return *p
	}
	// A tail that went backwards never satisfies a wait: catch it here.
	if t := l.in.tail.Load(); t < l.rx.tailSeen {
		return l.loadTail()
	}
	if now := time.Now(); now.Sub(l.rx.lastCheck) >= livenessEvery {
		l.rx.lastCheck = now
		if id := l.peerSlot.load(); id.dead(l.self, &l.rx.proc) {
			return fmt.Errorf("%w: rank %d (pid %d) exited without closing its shared-memory link", transport.ErrPeerLost, l.peer, id.pid)
		}
	}
	return nil
}

// politeEvery is how many polls a waiter makes between giving its P (or,
// with the Yield policy, its core) away while it spins.
const politeEvery = 32

// waitAtLeast is c.WaitAtLeastPolling after a spin of the policy's length that
// yields the processor every politeEvery polls. WaitAtLeast's own spin
// gives its P away only every few thousand polls, for microseconds at a
// time, and then sleeps in a system call that still holds the P until the
// runtime's monitor takes it back (20 us or more). On the receive side that
// P is the one the rank's goroutine, woken by the frame just delivered,
// needs to run: here, with two cores, it made a small-frame round trip
// between two processes or goroutines 20 to 100 us instead of 2 to 5.
func waitAtLeast(c *shmem.Counter, v uint64, deadline time.Time, stop func() error, poll time.Duration, p *shmem.Policy) error {
	if c.Load() >= v {
		return nil
	}
	if spin, yield := p.SpinFor(); spin > 0 {
		start := time.Now()
		for i := 1; ; i++ {
			if c.Load() >= v {
				return nil
			}
			if i%politeEvery == 0 {
				if yield {
					syscall.Syscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
				} else {
					runtime.Gosched()
				}
				if time.Since(start) >= spin {
					break
				}
			}
		}
	}
	return c.WaitAtLeastPolling(v, deadline, stop, poll, p)
}

// guarded runs f, which touches the region, turning a memory fault into
// an error.
func guarded(f func()) (err error) {
	shmem.Guard()
	defer func() { err = shmem.Recovered(recover(), err) }()
	f()
	return nil
}
