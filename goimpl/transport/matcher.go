package transport

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// AnySource as Recv.Peer asks for a point-to-point frame from any peer.
const AnySource = -1

// Receive states. A posted receive is in a queue; a claimed one is being
// filled by a link's receive side and no longer in any queue; a done one has
// its result.
const (
	recvIdle uint32 = iota
	recvPosted
	recvClaimed
	recvDone
)

// spinWait bounds how long Wait polls a receive before it sleeps. A wake from
// sleep costs tens of microseconds on a C-locked thread (DESIGN.md), a spin
// costs a core; small-message round trips finish within it.
const spinWait = 20 * time.Microsecond

// spinMaxBytes is the largest receive Wait polls for before a link has
// begun to fill it: the bytes the fastest link gohccl prices (100 Gbit/s,
// 12.5 GB/s) carries in spinWait. A larger frame whose header has not even
// arrived cannot be in within the spin, so polling for it only takes the
// core its own bytes' kernel copies need; one a link is already reading may
// be (docs/transports.md, "Where the time goes").
const spinMaxBytes = 256 << 10

// Recv is one posted receive. The caller owns it and may reuse it once Wait
// has returned; reuse allocates nothing.
type Recv struct {
	// Peer is the sending rank, or AnySource for a point-to-point receive.
	Peer int
	// Want is the header the frame must carry. For collectives every field
	// must match; for point-to-point frames Kind, Tag, DType, Count and Len.
	Want Header
	// Buf receives the payload; len(Buf) must equal Want.Len.
	Buf []byte

	// Source is the rank the frame came from, valid after Wait.
	Source int

	err   error
	state atomic.Uint32
	order uint64
	done  chan struct{}
	timer *time.Timer
}

// Done reports whether the receive has finished, successfully or not.
func (r *Recv) Done() bool { return r.state.Load() == recvDone }

// Err returns the receive's result once Done.
func (r *Recv) Err() error { return r.err }

// Pending reports whether the receive is posted and not finished yet: it
// waits in a queue or a link is filling it.
func (r *Recv) Pending() bool {
	s := r.state.Load()
	return s == recvPosted || s == recvClaimed
}

type stashed struct {
	h     Header
	buf   []byte
	order uint64
}

type peerQueue struct {
	coll      fifo[*Recv]
	collStash fifo[stashed]
	p2p       fifo[*Recv]
	p2pStash  fifo[stashed]
	dead      error
	// heard is the highest sequence number of a collective frame that
	// arrived from the peer, for timeout messages.
	heard uint64
	// early is the payload bytes of the peer's stashed frames: what the
	// peer made this rank hold before the receives were posted (see
	// ArriveBounded).
	early int
	// holding says a link waits in ArriveBounded with a frame from the
	// peer that it has compared but not read (see Holding).
	holding bool
}

// Matcher pairs arriving frames with posted receives for one rank. Frames of
// collectives from one peer match receives in posting order, and each must
// carry exactly the expected header; point-to-point frames match by tag, in
// order within a (peer, tag). A frame that arrives before its receive is
// posted is kept (stashed) until it is, so a sender need not wait for the
// receiver's program to reach its receive; links that can hold a sender back
// (TCP, shared memory) bound what each peer makes the matcher keep
// (ArriveBounded).
//
// An abort frame (KindAbort) matches no receive: it closes the matcher with
// a PeerAbortError carrying the peer's error text, so every waiting and later
// receive fails with the cause. Links need not know the kind: it travels the
// ordinary Arrive/StashBuffer/Stash path (or Deliver), like a frame that
// arrived before its receive.
type Matcher struct {
	rank int
	mu   sync.Mutex
	// peers[p] holds what concerns frames from rank p.
	peers    []peerQueue
	any      fifo[*Recv]
	nextPost uint64
	nextArr  uint64
	closed   error
	closedCh chan struct{}
	pool     bufPool
	// ops is this rank's own collectives as Begin announced them, for the
	// comparisons of ops.go.
	ops opLog
	// earlyLimit bounds each peer's early bytes for links that call
	// ArriveBounded; 0 means no bound. room is signalled, under mu, when a
	// waiting frame may now fit or match: a receive posted, an early frame
	// taken, the matcher closed, a link woken (Wake).
	earlyLimit int
	room       *sync.Cond
}

// NewMatcher returns the matcher of rank in a group of size ranks.
func NewMatcher(rank, size int) *Matcher {
	m := &Matcher{rank: rank, peers: make([]peerQueue, size), closedCh: make(chan struct{})}
	m.room = sync.NewCond(&m.mu)
	return m
}

// SetEarlyLimit bounds the payload bytes of frames from any one peer that
// the matcher holds before their receives are posted, for links whose
// receive side calls ArriveBounded; 0 removes the bound. Call it before the
// links start.
func (m *Matcher) SetEarlyLimit(n int) {
	m.mu.Lock()
	m.earlyLimit = max(n, 0)
	m.mu.Unlock()
}

// EarlyBytes returns the payload bytes of frames from peer held for
// receives not posted yet.
func (m *Matcher) EarlyBytes(peer int) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peers[peer].early
}

// ArriveBounded is Arrive for a link that can stop reading its connection
// (a stream socket, whose sender then blocks in the kernel; a shared-memory
// ring, whose sender then waits for room): when the frame
// matches no posted receive and keeping it would take the peer's early bytes
// above the limit (SetEarlyLimit), it waits, holding the frame's header and
// leaving its payload in the connection, until the receive is posted or
// earlier frames are taken. That is the back-pressure that bounds what a
// peer can make this rank hold: the frames behind it stay in the sender's
// socket or ring and then in its Send. gone reports that the link is closing; it is
// checked at every wake-up (Wake). A frame larger than the limit is never
// kept: it waits for its receive.
//
// Frames from one peer are read in order, so the receive the waiting frame
// needs is the next one the receiver posts for that peer in collective order:
// collectives cannot deadlock on the bound (every schedule posts a step's
// receives before it sends the step). Point-to-point programs that post
// receives in another order than their peer sends, beyond the limit, wait
// until the sender's deadline.
func (m *Matcher) ArriveBounded(peer int, h *Header, gone func() bool) (dst []byte, r *Recv, discard bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if h.Kind == KindAnnounce {
		return nil, nil, m.closed != nil // no payload; compared in Stash
	}
	if m.closed == nil && h.Kind != KindAbort {
		if m.compareArrival(peer, h) != nil {
			return nil, nil, true
		}
		m.heardFrom(peer, h)
	}
	for {
		if m.closed != nil || gone() {
			return nil, nil, true
		}
		if h.Kind == KindAbort {
			return nil, nil, false // bounded by MaxAbortText; it closes the matcher
		}
		r, ok := m.matchArrival(peer, h)
		if !ok {
			return nil, nil, true
		}
		if r != nil {
			r.state.Store(recvClaimed)
			return r.Buf, r, false
		}
		pq := &m.peers[peer]
		if m.earlyLimit == 0 || h.Len == 0 || pq.early+int(h.Len) <= m.earlyLimit {
			return nil, nil, false
		}
		pq.holding = true
		m.room.Wait()
		pq.holding = false
	}
}

// Holding reports whether a link waits in ArriveBounded with a frame from
// peer that the peer's early frames leave no room for. The frame has been
// compared with this rank's ops, and no receive of it is posted, so it and
// every frame behind it belong to ops this rank has not begun.
func (m *Matcher) Holding(peer int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peers[peer].holding
}

// Wake wakes every link waiting in ArriveBounded, so that one whose gone
// now reports true returns.
func (m *Matcher) Wake() {
	m.mu.Lock()
	m.room.Broadcast()
	m.mu.Unlock()
}

// tookEarly records that a stashed frame of n bytes from peer was taken.
func (m *Matcher) tookEarly(peer, n int) {
	m.peers[peer].early -= n
	if m.earlyLimit > 0 && n > 0 {
		m.room.Broadcast()
	}
}

// Arrive is called by a link's receive side for each decoded header from
// peer. If a receive is posted for it, Arrive returns that receive and its
// buffer: the caller reads the payload into dst and calls Complete. If none
// is, it returns nil and the caller reads the payload into a buffer from
// StashBuffer and passes it to Stash. If the frame must be discarded (it
// failed a posted receive, or the matcher is closed), dst is nil and r is nil
// and discard is true: the caller reads and drops h.Len bytes.
func (m *Matcher) Arrive(peer int, h *Header) (dst []byte, r *Recv, discard bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed != nil {
		return nil, nil, true
	}
	if h.Kind == KindAbort || h.Kind == KindAnnounce {
		return nil, nil, false // its text is read into a stash buffer, see Stash
	}
	if m.compareArrival(peer, h) != nil {
		return nil, nil, true
	}
	m.heardFrom(peer, h)
	r, ok := m.matchArrival(peer, h)
	if !ok {
		return nil, nil, true
	}
	if r == nil {
		return nil, nil, false
	}
	r.state.Store(recvClaimed)
	return r.Buf, r, false
}

// heardFrom records a collective frame's sequence number; see LastSeq.
func (m *Matcher) heardFrom(peer int, h *Header) {
	if pq := &m.peers[peer]; !h.Kind.IsP2P() && h.Seq > pq.heard {
		pq.heard = h.Seq
	}
}

// LastSeq returns the sequence number of the latest collective frame that
// arrived from peer, or 0 if none has: a timed-out op uses it to tell a peer
// that never reached the op from one that stalled inside it.
func (m *Matcher) LastSeq(peer int) uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if peer < 0 || peer >= len(m.peers) {
		return 0
	}
	return m.peers[peer].heard
}

// matchArrival finds the posted receive for a frame from peer, removing it
// from its queue. ok is false when the frame failed the receive it matched
// (the receive is completed with the error).
func (m *Matcher) matchArrival(peer int, h *Header) (r *Recv, ok bool) {
	pq := &m.peers[peer]
	if h.Kind.IsP2P() {
		best, bestAny := -1, -1
		for i := 0; i < pq.p2p.len(); i++ {
			if pq.p2p.at(i).Want.Tag == h.Tag {
				best = i
				break
			}
		}
		for i := 0; i < m.any.len(); i++ {
			if m.any.at(i).Want.Tag == h.Tag {
				bestAny = i
				break
			}
		}
		switch {
		case best < 0 && bestAny < 0:
			return nil, true
		case bestAny < 0 || (best >= 0 && pq.p2p.at(best).order < m.any.at(bestAny).order):
			r = pq.p2p.remove(best)
		default:
			r = m.any.remove(bestAny)
		}
		r.Source = peer
		if err := checkP2P(m.rank, peer, &r.Want, h); err != nil {
			m.complete(r, err)
			return nil, false
		}
		return r, true
	}
	if pq.coll.len() == 0 || pq.collStash.len() > 0 {
		return nil, true
	}
	r = pq.coll.remove(0)
	r.Source = peer
	if err := checkCollective(m.rank, peer, &r.Want, h); err != nil {
		m.complete(r, err)
		return nil, false
	}
	return r, true
}

// Complete finishes a receive that Arrive handed out.
func (m *Matcher) Complete(r *Recv, err error) {
	m.mu.Lock()
	m.complete(r, err)
	m.mu.Unlock()
}

func (m *Matcher) complete(r *Recv, err error) {
	r.err = err
	r.state.Store(recvDone)
	select {
	case r.done <- struct{}{}:
	default:
	}
}

// StashBuffer returns a buffer of n bytes for a frame nobody waits for yet.
func (m *Matcher) StashBuffer(n int) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pool.get(n)
}

// Stash keeps a fully read frame from peer until its receive is posted; if
// one was posted meanwhile, it is filled now. The matcher owns buf after.
func (m *Matcher) Stash(peer int, h *Header, buf []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed != nil {
		m.pool.put(buf)
		return
	}
	if h.Kind == KindAbort {
		cause := strings.ToValidUTF8(string(buf), "?")
		m.pool.put(buf)
		m.close(&PeerAbortError{Rank: peer, Cause: cause, Class: abortClassOf(h.Tag), Seq: h.Seq})
		return
	}
	if h.Kind == KindAnnounce {
		m.pool.put(buf)
		m.compareAnnounce(peer, h)
		return
	}
	if m.compareArrival(peer, h) != nil {
		m.pool.put(buf)
		return
	}
	m.heardFrom(peer, h)
	r, ok := m.matchArrival(peer, h)
	if !ok {
		m.pool.put(buf)
		return
	}
	if r != nil {
		copy(r.Buf, buf)
		m.pool.put(buf)
		m.complete(r, nil)
		return
	}
	s := stashed{h: *h, buf: buf, order: m.nextArr}
	m.nextArr++
	m.peers[peer].early += len(buf)
	if h.Kind.IsP2P() {
		m.peers[peer].p2pStash.push(s)
	} else {
		m.peers[peer].collStash.push(s)
	}
}

// Deliver hands a whole frame to the matcher from the sender's side, for
// transports whose sender can reach the receiver's memory (in-process,
// self-sends). It copies payload.
func (m *Matcher) Deliver(peer int, h *Header, payload []byte) {
	dst, r, discard := m.Arrive(peer, h)
	switch {
	case r != nil:
		copy(dst, payload)
		m.Complete(r, nil)
	case !discard:
		buf := m.StashBuffer(len(payload))
		copy(buf, payload)
		m.Stash(peer, h, buf)
	}
}

// Post registers r. It never blocks; wait for the result with Wait.
func (m *Matcher) Post(r *Recv) {
	if r.done == nil {
		r.done = make(chan struct{}, 1)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	// Drop a stale wake-up from an earlier use. Under the lock: complete,
	// which sends the wake-up, runs under it too, after marking the receive
	// done, so a Wait that saw the done state can return and the caller
	// repost before the wake-up is sent. Drained before the lock, that
	// wake-up would stay and end the next Wait before its frame arrived.
	select {
	case <-r.done:
	default:
	}
	r.err = nil
	r.Source = r.Peer
	r.order = m.nextPost
	m.nextPost++
	r.state.Store(recvPosted)
	if m.closed != nil {
		m.complete(r, m.closed)
		return
	}
	if len(r.Buf) != int(r.Want.Len) {
		m.complete(r, fmt.Errorf("internal: receive buffer of %d bytes for a %d-byte frame", len(r.Buf), r.Want.Len))
		return
	}
	if r.Peer == AnySource {
		m.postAny(r)
		return
	}
	if r.Peer < 0 || r.Peer >= len(m.peers) {
		m.complete(r, fmt.Errorf("receive from rank %d, outside the group of %d", r.Peer, len(m.peers)))
		return
	}
	pq := &m.peers[r.Peer]
	if r.Want.Kind.IsP2P() {
		for i := 0; i < pq.p2pStash.len(); i++ {
			if pq.p2pStash.at(i).h.Tag == r.Want.Tag {
				m.fillFromStash(r, r.Peer, pq.p2pStash.remove(i))
				return
			}
		}
		if pq.dead != nil {
			m.complete(r, pq.dead)
			return
		}
		pq.p2p.push(r)
		m.posted()
		return
	}
	if pq.collStash.len() > 0 {
		m.fillFromStash(r, r.Peer, pq.collStash.remove(0))
		return
	}
	if pq.dead != nil {
		m.complete(r, pq.dead)
		return
	}
	pq.coll.push(r)
	m.posted()
}

// posted wakes links waiting in ArriveBounded: the receive just queued may
// be the one a waiting frame needs.
func (m *Matcher) posted() {
	if m.earlyLimit > 0 {
		m.room.Broadcast()
	}
}

func (m *Matcher) postAny(r *Recv) {
	bestPeer, bestIdx := -1, -1
	var bestOrder uint64
	for p := range m.peers {
		q := &m.peers[p].p2pStash
		for i := 0; i < q.len(); i++ {
			if s := q.at(i); s.h.Tag == r.Want.Tag {
				if bestPeer < 0 || s.order < bestOrder {
					bestPeer, bestIdx, bestOrder = p, i, s.order
				}
				break
			}
		}
	}
	if bestPeer >= 0 {
		m.fillFromStash(r, bestPeer, m.peers[bestPeer].p2pStash.remove(bestIdx))
		return
	}
	m.any.push(r)
	m.posted()
}

func (m *Matcher) fillFromStash(r *Recv, peer int, s stashed) {
	r.Source = peer
	m.tookEarly(peer, len(s.buf))
	var err error
	if s.h.Kind.IsP2P() {
		err = checkP2P(m.rank, peer, &r.Want, &s.h)
	} else {
		err = checkCollective(m.rank, peer, &r.Want, &s.h)
	}
	if err == nil {
		copy(r.Buf, s.buf)
	}
	m.pool.put(s.buf)
	m.complete(r, err)
}

// Wait blocks until r is done or the deadline passes. On timeout the receive
// is withdrawn if no link has claimed it yet; if one has, the caller must
// abort the mesh (closing the links ends the claim) and call Wait again, so
// that no transport writes into the buffer after the caller got it back.
func (m *Matcher) Wait(r *Recv, deadline time.Time) error {
	if r.state.Load() == recvDone {
		return r.err
	}
	for spinUntil := time.Now().Add(spinWait); (len(r.Buf) <= spinMaxBytes || r.state.Load() == recvClaimed) && time.Now().Before(spinUntil); {
		for i := 0; i < 64; i++ {
			if r.state.Load() == recvDone {
				return r.err
			}
		}
		runtime.Gosched()
	}
	d := time.Until(deadline)
	if d <= 0 {
		return m.expire(r)
	}
	// A collective's receive wakes every watchEvery to run the watch
	// (SetWatch), which announces the op to the peers.
	watch, every := m.ops.watch, m.ops.watchEvery
	if watch == nil || r.Want.Kind.IsP2P() {
		every = 0
	}
	next := d
	if every > 0 {
		next = min(d, every)
	}
	if r.timer == nil {
		r.timer = time.NewTimer(next)
	} else {
		r.timer.Reset(next)
	}
	for {
		select {
		case <-r.done:
			// A wake-up only counts with the done state: the state, not the
			// token, is the receive's result.
			if r.state.Load() != recvDone {
				continue
			}
			r.timer.Stop()
			return r.err
		case <-r.timer.C:
			if d := time.Until(deadline); every > 0 && d > 0 {
				if err := watch(); err != nil {
					return m.withdraw(r, err)
				}
				r.timer.Reset(min(d, every))
				continue
			}
			return m.expire(r)
		case <-m.closedCh:
			r.timer.Stop()
			return m.withdraw(r, m.closedErr())
		}
	}
}

func (m *Matcher) closedErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}

// expire withdraws r after its deadline passed; see Wait.
func (m *Matcher) expire(r *Recv) error {
	return m.withdraw(r, &RecvTimeoutError{Peer: r.Peer, Want: r.Want})
}

func (m *Matcher) withdraw(r *Recv, cause error) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch r.state.Load() {
	case recvDone:
		return r.err
	case recvClaimed:
		return fmt.Errorf("%w (a transfer into the buffer is in progress)", cause)
	}
	m.unqueue(r)
	m.complete(r, cause)
	return cause
}

func (m *Matcher) unqueue(r *Recv) {
	drop := func(q *fifo[*Recv]) bool {
		for i := 0; i < q.len(); i++ {
			if q.at(i) == r {
				q.remove(i)
				return true
			}
		}
		return false
	}
	if drop(&m.any) {
		return
	}
	for p := range m.peers {
		if drop(&m.peers[p].coll) || drop(&m.peers[p].p2p) {
			return
		}
	}
}

// WaitClaimed waits, without a deadline, for a claimed receive to finish. It
// is for after an abort, when the links are closed and every claim ends.
// It polls rather than taking the wake-up token, which a concurrent Wait on
// the same receive may hold.
func (m *Matcher) WaitClaimed(r *Recv) error {
	for r.state.Load() == recvClaimed {
		time.Sleep(50 * time.Microsecond)
	}
	return r.err
}

// Fail records that the link to peer is gone: every receive posted for it
// fails with err, and so does every later one. Frames already stashed from
// that peer stay receivable.
func (m *Matcher) Fail(peer int, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	pq := &m.peers[peer]
	if pq.dead == nil {
		pq.dead = err
	}
	for pq.coll.len() > 0 {
		m.complete(pq.coll.remove(0), err)
	}
	for pq.p2p.len() > 0 {
		m.complete(pq.p2p.remove(0), err)
	}
}

// Err returns the error the matcher was closed with (by Close or by a
// peer's abort frame), or nil while it is open. It takes no lock until then.
func (m *Matcher) Err() error {
	select {
	case <-m.closedCh:
		return m.closedErr()
	default:
		return nil
	}
}

// Close fails every posted and later receive with err (which should wrap
// ErrClosed or the cause of an abort) and releases stashed frames. The
// first close wins.
func (m *Matcher) Close(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.close(err)
}

func (m *Matcher) close(err error) {
	if m.closed != nil {
		return
	}
	m.closed = err
	close(m.closedCh)
	for p := range m.peers {
		pq := &m.peers[p]
		for pq.coll.len() > 0 {
			m.complete(pq.coll.remove(0), err)
		}
		for pq.p2p.len() > 0 {
			m.complete(pq.p2p.remove(0), err)
		}
		pq.collStash.clear()
		pq.p2pStash.clear()
		pq.early = 0
	}
	m.room.Broadcast()
	for m.any.len() > 0 {
		m.complete(m.any.remove(0), err)
	}
	m.pool = bufPool{}
}

func checkCollective(rank, peer int, want, got *Header) error {
	if got.Kind.IsP2P() || want.Fingerprint != got.Fingerprint || want.Seq != got.Seq {
		return fmt.Errorf("%w: rank %d (this process) expected %s but rank %d sent %s",
			ErrMismatch, rank, describeOp(want), peer, describeOp(got))
	}
	if want.Tag != got.Tag || want.Len != got.Len {
		return fmt.Errorf("%w: rank %d (this process) expected %s of %d bytes in %s but rank %d sent %s of %d bytes",
			ErrMismatch, rank, stepName(want.Tag), want.Len, describeOp(want), peer, stepName(got.Tag), got.Len)
	}
	return nil
}

func checkP2P(rank, peer int, want, got *Header) error {
	if want.DType != got.DType || want.Count != got.Count || want.Len != got.Len {
		return fmt.Errorf("%w: rank %d (this process) posted a receive of %d %s elements with tag %d, but rank %d sent %d %s elements",
			ErrSize, rank, want.Count, want.DType, want.Tag, peer, got.Count, got.DType)
	}
	return nil
}

func describeOp(h *Header) string {
	return fmt.Sprintf("collective #%d (%s)", h.Seq, h.Fingerprint)
}

// bufPool keeps stash buffers by power-of-two size class so a steady stream
// of early frames allocates nothing. It is guarded by the matcher's lock.
type bufPool struct {
	free [32][][]byte
	kept int
}

// maxPooled bounds the bytes the pool keeps for reuse.
const maxPooled = 64 << 20

func sizeClass(n int) int {
	c := 0
	for (1 << c) < n {
		c++
	}
	return c
}

func (p *bufPool) get(n int) []byte {
	c := sizeClass(n)
	if c < len(p.free) {
		if l := len(p.free[c]); l > 0 {
			b := p.free[c][l-1]
			p.free[c] = p.free[c][:l-1]
			p.kept -= cap(b)
			return b[:n]
		}
	}
	return make([]byte, n, 1<<c)
}

func (p *bufPool) put(b []byte) {
	c := sizeClass(cap(b))
	if c >= len(p.free) || cap(b) != 1<<c || p.kept+cap(b) > maxPooled {
		return
	}
	p.kept += cap(b)
	p.free[c] = append(p.free[c], b[:0])
}
