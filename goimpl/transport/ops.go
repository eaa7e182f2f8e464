package transport

import (
	"fmt"
	"time"
)

// What the matcher knows of this rank's own collectives, so that it can
// compare every collective frame and announce with the op this rank ran as
// that sequence number, whether or not a receive waits for it. Without it a
// frame nobody receives (a rooted op with another root, an op the
// shared-memory engine ran here) waited in the stash until some later op
// of the links posted a receive from that peer, and data went wrong or ops
// timed out in between.

// opHistory is how many of this rank's latest collectives the matcher
// remembers, to name what it ran when a late frame or announce arrives.
const opHistory = 64

type opLog struct {
	// cur is the stamp (fingerprint and sequence number) of the
	// collective in progress or last begun; Seq 0 before the first.
	cur Header
	// fps[s%opHistory] is collective #s's fingerprint, for the opHistory
	// latest.
	fps [opHistory]Fingerprint
	// ahead[p] is peer p's announce of a collective this rank has not
	// begun yet (Seq 0: none), compared when it does.
	ahead []Header
	// onFail, if set, is run (on its own goroutine) when the matcher
	// closes itself on a mismatch it found, so that the communicator tells
	// its peers even while no op of its own waits.
	onFail func(error)
	// watch, if set, is called every watchEvery while a collective's
	// receive sleeps in Wait.
	watch      func() error
	watchEvery time.Duration
}

// sameOp says whether two fingerprints name one op. An all-to-all's frames
// carry each pair's count, which differs from pair to pair: its kind and
// dtype are the op.
func sameOp(a, b Fingerprint) bool {
	if a.Kind == KindAllToAll && b.Kind == KindAllToAll {
		a.Count, b.Count = 0, 0
	}
	return a == b
}

// mine returns this rank's fingerprint of collective #seq, if it began it
// and still remembers it.
func (l *opLog) mine(seq uint64) (Fingerprint, bool) {
	if seq == 0 || seq > l.cur.Seq || l.cur.Seq-seq >= opHistory {
		return Fingerprint{}, false
	}
	return l.fps[seq%opHistory], true
}

// OnFail installs fn, run on a goroutine of its own when the matcher closes
// itself because a frame or announce did not match this rank's op. Call it
// before any frame arrives.
func (m *Matcher) OnFail(fn func(error)) {
	m.mu.Lock()
	m.ops.onFail = fn
	m.mu.Unlock()
}

// SetWatch installs fn, called every interval while a collective's receive
// sleeps in Wait; an error from it ends the wait with that error. The
// communicator announces its op from it. Call it before the first Wait.
func (m *Matcher) SetWatch(every time.Duration, fn func() error) {
	m.mu.Lock()
	m.ops.watch, m.ops.watchEvery = fn, every
	m.mu.Unlock()
}

// Begin records that this rank starts the collective stamped stamp (a
// sequence number above every earlier one) and compares it with what
// arrived early for it: a stashed frame of an op this rank has finished
// (nobody received it: the ranks ran different schedules), or a frame or
// announce of this sequence number with another fingerprint, is a
// mismatch: the matcher closes with it and Begin returns it.
func (m *Matcher) Begin(stamp *Header) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed != nil {
		return m.closed
	}
	l := &m.ops
	l.cur = Header{Fingerprint: stamp.Fingerprint, Seq: stamp.Seq}
	l.fps[stamp.Seq%opHistory] = stamp.Fingerprint
	for p := range m.peers {
		if l.ahead != nil {
			if a := &l.ahead[p]; a.Seq != 0 && a.Seq <= stamp.Seq {
				h := AnnouncedStamp(a)
				*a = Header{}
				if err := m.compareAnnounced(p, &h); err != nil {
					return err
				}
			}
		}
		// A peer's collective frames arrive in the order it ran its ops
		// (they match receives in posting order), so the stash holds
		// nothing to compare past the first frame of a later op. A peer
		// that runs ahead (a broadcast's root, whose sends wait for no
		// one) can leave thousands of frames here, and scanning them all
		// at every op made each op cost more the further behind this
		// rank fell.
		q := &m.peers[p].collStash
		for i := 0; i < q.len(); i++ {
			h := q.at(i).h
			if h.Seq > stamp.Seq {
				break
			}
			if err := m.compareFrame(p, &h); err != nil {
				return err
			}
		}
	}
	return nil
}

// compareArrival compares an arriving collective frame; see compareFrame.
func (m *Matcher) compareArrival(peer int, h *Header) error {
	if h.Kind.IsP2P() {
		return nil
	}
	return m.compareFrame(peer, h)
}

// compareFrame fails the matcher if the collective frame h from peer
// belongs to an op this rank has begun under another fingerprint, or to
// one it has finished (no receive of it is left). A frame of a later op
// waits in the stash for Begin.
func (m *Matcher) compareFrame(peer int, h *Header) error {
	l := &m.ops
	if h.Seq == 0 || h.Seq > l.cur.Seq {
		return nil
	}
	mine, known := l.mine(h.Seq)
	var err error
	switch {
	case known && !sameOp(mine, h.Fingerprint):
		err = fmt.Errorf("%w: rank %d (this process) expected collective #%d (%s) but rank %d sent collective #%d (%s)",
			ErrMismatch, m.rank, h.Seq, mine, peer, h.Seq, h.Fingerprint)
	case h.Seq < l.cur.Seq:
		what := "an op it no longer remembers"
		if known {
			what = fmt.Sprintf("collective #%d (%s)", h.Seq, mine)
		}
		err = fmt.Errorf("%w: rank %d (this process) expected no more frames of %s, which it had finished, but rank %d sent collective #%d (%s, %s): the ranks run it with different schedules",
			ErrMismatch, m.rank, what, peer, h.Seq, h.Fingerprint, stepName(h.Tag))
	default:
		return nil
	}
	m.failLocked(err)
	return err
}

// compareAnnounce handles peer's announce frame h: compared now if this
// rank has begun that op, else kept for Begin.
func (m *Matcher) compareAnnounce(peer int, h *Header) {
	a := AnnouncedStamp(h)
	l := &m.ops
	if a.Seq > l.cur.Seq {
		if l.ahead == nil {
			l.ahead = make([]Header, len(m.peers))
		}
		l.ahead[peer] = *h
		return
	}
	m.compareAnnounced(peer, &a)
}

// compareAnnounced fails the matcher if the op peer announced (stamp a) is
// not the one this rank ran as that sequence number.
func (m *Matcher) compareAnnounced(peer int, a *Header) error {
	mine, known := m.ops.mine(a.Seq)
	if !known || sameOp(mine, a.Fingerprint) {
		return nil
	}
	err := fmt.Errorf("%w: rank %d (this process) expected collective #%d (%s) but rank %d sent word that it is in collective #%d (%s)",
		ErrMismatch, m.rank, a.Seq, mine, peer, a.Seq, a.Fingerprint)
	m.failLocked(err)
	return err
}

// failLocked closes the matcher with err, a mismatch it found itself, and
// runs onFail. The lock is held.
func (m *Matcher) failLocked(err error) {
	if m.closed != nil {
		return
	}
	m.close(err)
	if fn := m.ops.onFail; fn != nil {
		go fn(err)
	}
}

// Ran returns this rank's fingerprint of collective #seq, if it began it and
// the matcher still remembers it.
func (m *Matcher) Ran(seq uint64) (Fingerprint, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ops.mine(seq)
}
