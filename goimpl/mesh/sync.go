package mesh

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gohccl/gohccl/goimpl/shm"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// The synchronisation protocol, shared by every schedule. For chunk k (the
// global chunk sequence) in buffer b = k % depth, stamp line k % stamps:
//
//   - claim: before writing its buffer b or its stamp line, a rank waits
//     until every peer's free counter is at least k+1-depth, i.e. every
//     peer has finished with chunk k-depth, the last one that used buffer
//     b. (An eager chunk, which uses no buffer, waits for k+1-stamps.)
//   - post: it writes its stamp and data, then stores ready = 2k+1
//     (inputs) or 2k+2 (results). Peers that see the value see the bytes.
//   - await: a peer waits for ready[j] >= 2k+1 (or 2k+2) and compares j's
//     stamp for chunk k with the one it expects.
//   - release: once a rank has read everything it reads of chunk k, it
//     stores free = k+1. Every rank releases every chunk, in order, even one
//     it read nothing of, so that claims never wait on a chunk nobody reads.
//     The root of an eager broadcast holds its free counter below a chunk
//     until it has compared every peer's stamp for it (verify), which keeps
//     those stamps in their lines until then.
//
// Counters only grow: ready takes 2k+1 and 2k+2 for increasing k, free
// takes k+1. Nothing is reset between operations, so no operation ever needs
// a closing barrier.

// schedule names what a chunk belongs to, in its stamp's Tag: two ranks that
// agree on the stamp but run different schedules (a bug, or different
// builds) are caught like a mismatched collective.
type schedule uint8

const (
	schedBarrier schedule = 1 + iota
	schedAllReduceOneShot
	schedAllReduceTwoPhase
	schedReduceOneShot
	schedReduceTwoPhase
	schedReduceScatter
	schedReduceScatterBlocks
	schedAllGather
	schedAllGatherBlocks
	schedBroadcast
	schedAllReduceSingleCopy
	schedAllGatherSingleCopy
	schedBroadcastSingleCopy
	schedBroadcastEager
)

var scheduleNames = [...]string{"invalid", "barrier", "one-shot all-reduce", "two-phase all-reduce",
	"one-shot reduce", "two-phase reduce", "reduce-scatter", "reduce-scatter blocks",
	"allgather", "allgather blocks", "broadcast", "single-copy all-reduce", "single-copy allgather", "single-copy broadcast", "eager broadcast"}

func (s schedule) String() string {
	if int(s) < len(scheduleNames) {
		return scheduleNames[s]
	}
	return fmt.Sprintf("schedule(%d)", uint8(s))
}

// chunkTag packs a chunk's schedule and global chunk number into a Tag.
func chunkTag(s schedule, k uint64) uint64 { return uint64(s)<<56 | k&(1<<56-1) }

func describeChunk(tag uint64) string {
	return fmt.Sprintf("chunk %d of the %s schedule", tag&(1<<56-1), schedule(tag>>56))
}

func describeOp(h *transport.Header) string {
	return fmt.Sprintf("collective #%d (%s)", h.Seq, h.Fingerprint)
}

// open starts chunk k of schedule s: it computes the stamp every rank must
// publish for it, which await compares the peers' stamps with.
func (e *Engine) open(s schedule, k uint64) {
	h := e.call.Stamp
	h.Tag = chunkTag(s, k)
	h.Len = 0
	h.Encode(e.want[:])
}

// stampOf returns the stamp line of the chunk whose ready value is v
// (2k+1 or 2k+2).
func stampOf(v uint64) int { return int((v - 1) / 2 % stamps) }

// stampLine returns rank r's stamp line s.
func (e *Engine) stampLine(r, s int) []byte {
	o := e.lay.ctl(r, lineStamp+s)
	return e.region[o : o+transport.HeaderSize]
}

// slot returns rank r's buffer b.
func (e *Engine) slot(r, b int) []byte {
	o := e.lay.data(r, b)
	return e.region[o : o+e.lay.buf : o+e.lay.buf]
}

// claim waits until this rank may write its buffer and stamp for chunk k.
func (e *Engine) claim(k uint64) error { return e.claimBack(k, depth) }

// claimBack waits until every peer has released chunk k-back.
func (e *Engine) claimBack(k uint64, back uint64) error {
	if k < back {
		return nil
	}
	need := k + 1 - back
	for j := range e.n {
		if j == e.me || e.seenFree[j] >= need {
			continue
		}
		if err := e.wait(e.free, j, need, "buffer release", true); err != nil {
			return err
		}
		e.seenFree[j] = e.free[j].Load()
	}
	return nil
}

// post publishes this rank's stamp for the chunk and then value v of
// ready: the data must already be in the buffer.
func (e *Engine) post(v uint64) {
	copy(e.stampLine(e.me, stampOf(v)), e.want[:])
	e.ready[e.me].Store(v)
}

// await waits for ready[j] >= v. With stamp set it then checks j's stamp
// for the chunk (the first wait on j in each chunk does).
func (e *Engine) await(j int, v uint64, stamp, all bool) error {
	what := "inputs"
	if v%2 == 0 {
		what = "results"
	}
	if err := e.wait(e.ready, j, v, what, all); err != nil {
		return err
	}
	if !e.checked[j] {
		if err := e.checkInfo(j); err != nil {
			return err
		}
	}
	if stamp && string(e.stampLine(j, stampOf(v))) != string(e.want[:]) {
		return e.mismatch(e.want[:], j, stampOf(v))
	}
	return nil
}

// awaitAll awaits every peer.
func (e *Engine) awaitAll(v uint64, stamp bool) error {
	for j := range e.n {
		if j != e.me {
			if err := e.await(j, v, stamp, true); err != nil {
				return err
			}
		}
	}
	return nil
}

// release tells the peers this rank has finished reading chunk k: free
// becomes k+1, or stays at the first eager chunk it has not verified.
func (e *Engine) release(k uint64) {
	e.done = k + 1
	e.free[e.me].Store(e.freeValue())
}

// freeValue is what this rank's free counter may say: every chunk done,
// up to the first it holds for verification.
func (e *Engine) freeValue() uint64 {
	if e.heldLen > 0 {
		return min(e.done, e.held[e.heldHead])
	}
	return e.done
}

// wait waits for cs[j] >= v under the operation's deadline and stop check.
// all says the rank waits on every peer's counter of cs in turn, so a
// timeout names every peer still short of v.
func (e *Engine) wait(cs []*shm.Counter, j int, v uint64, what string, all bool) error {
	c := cs[j]
	if c.Load() >= v {
		return nil
	}
	e.waitC, e.waitV = c, v
	err := c.WaitAtLeast(v, e.deadline, e.stopFn, &e.opt.Wait)
	e.waitC = nil
	switch {
	case err == nil:
		return nil
	case errors.Is(err, shm.ErrDeadline):
		t := &TimeoutError{Stamp: e.call.Stamp, What: what, Chunk: e.chunk, Chunks: e.chunks, Local: e.names == nil}
		for r := range e.n {
			if r == j || all && r != e.me && cs[r].Load() < v {
				t.Missing = append(t.Missing, e.name(r))
			}
		}
		return t
	}
	return fmt.Errorf("%s on shared memory: %w", describeOp(&e.call.Stamp), err)
}

func (e *Engine) name(r int) int {
	if e.names != nil {
		return e.names[r]
	}
	return r
}

// mismatch describes peer j, whose stamp line s is not mine, the stamp
// this rank expected there.
func (e *Engine) mismatch(mine []byte, j, s int) error {
	var want, got transport.Header
	if err := want.Decode(mine); err != nil {
		return fmt.Errorf("mesh: internal: this rank's own stamp does not decode: %v", err)
	}
	if err := got.Decode(e.stampLine(j, s)); err != nil {
		return fmt.Errorf("%w: %s expected %s but %s published a stamp that is not a valid header (%v)",
			transport.ErrProtocol, e.who(e.me), describeOp(&want), e.who(j), err)
	}
	if got.Fingerprint != want.Fingerprint || got.Seq != want.Seq {
		return &MismatchError{Want: want, Got: got, Peer: e.name(j),
			text: fmt.Sprintf("%v: %s expected %s but %s sent %s",
				transport.ErrMismatch, e.who(e.me), describeOp(&want), e.who(j), describeOp(&got))}
	}
	return fmt.Errorf("%w: %s expected %s in %s but %s sent %s",
		transport.ErrMismatch, e.who(e.me), describeChunk(want.Tag), describeOp(&want), e.who(j), describeChunk(got.Tag))
}

// TimeoutError is a wait on the shared region that reached the operation's
// deadline. It wraps transport.ErrTimeout.
type TimeoutError struct {
	// Stamp is the operation's stamp.
	Stamp transport.Header
	// What was awaited: "inputs", "results" or "buffer release".
	What string
	// Missing lists the ranks not heard from: local ranks, or the names
	// SetRanks gave them (Local tells which).
	Missing []int
	Local   bool
	// Chunk is the chunk of the operation the wait was in, of Chunks.
	Chunk, Chunks int
}

func (t *TimeoutError) Error() string {
	who := "rank"
	if t.Local {
		who = "local rank"
	}
	if len(t.Missing) != 1 {
		who += "s"
	}
	ranks := make([]string, len(t.Missing))
	for i, r := range t.Missing {
		ranks[i] = fmt.Sprint(r)
	}
	return fmt.Sprintf("%v waiting for %s on shared memory: no %s from %s %s (chunk %d of %d)",
		transport.ErrTimeout, describeOp(&t.Stamp), t.What, who, strings.Join(ranks, ", "), t.Chunk+1, t.Chunks)
}

// Unwrap makes errors.Is(err, transport.ErrTimeout) hold.
func (t *TimeoutError) Unwrap() error { return transport.ErrTimeout }

// enterAhead is how a schedule that posts ahead (see ahead) enters chunk i
// of chunks under schedule s: it posts, with post, the chunks from *posted
// up to i+ahead that are not posted yet, then awaits every peer's inputs of
// chunk i, and returns the chunk's sequence number and buffer. post is only
// called, so the caller's closure does not escape.
func (e *Engine) enterAhead(s schedule, i, chunks int, posted *int, post func(int) error) (k uint64, b int, err error) {
	for ; *posted < chunks && *posted <= i+ahead; *posted++ {
		if err := post(*posted); err != nil {
			return 0, 0, err
		}
	}
	// The posts opened their own chunks: reopen this one.
	k, b = e.step(i)
	e.open(s, k)
	return k, b, e.awaitAll(2*k+1, true)
}

// MismatchError is a peer whose stamp names another collective than this
// rank's: Want is this rank's stamp, Got the peer's. The communicator adds
// what it knows of the other op (what it ran itself as Got's sequence
// number). It wraps transport.ErrMismatch.
type MismatchError struct {
	Want, Got transport.Header
	Peer      int
	text      string
}

func (m *MismatchError) Error() string { return m.text }

// Unwrap makes errors.Is(err, transport.ErrMismatch) hold.
func (m *MismatchError) Unwrap() error { return transport.ErrMismatch }

// hold queues eager chunk k, which this rank rooted, for verify.
func (e *Engine) hold(k uint64) {
	e.held[(e.heldHead+e.heldLen)%stamps] = k
	e.heldLen++
}

// verify compares, oldest first, every peer's stamp for each held chunk
// with this rank's own. It waits for the stamps of the chunks before
// before; a later chunk whose stamps have not all been posted stays held.
// The held stamps are all still in their lines: a peer overwrites line
// p%stamps only for chunk p+stamps, whose claim waits for this rank's free
// counter to pass p. verify stores the free counter once it has passed a
// chunk: a peer may be waiting for it while this rank goes on to wait for
// the peer.
func (e *Engine) verify(before uint64) error {
	was := e.heldLen
	defer func() {
		if e.heldLen != was {
			e.free[e.me].Store(e.freeValue())
		}
	}()
	for e.heldLen > 0 {
		p := e.held[e.heldHead]
		v := 2*p + 1
		for j := range e.n {
			if j == e.me || e.ready[j].Load() >= v {
				continue
			}
			if p >= before {
				return nil
			}
			if err := e.wait(e.ready, j, v, "stamps of an earlier broadcast", true); err != nil {
				return err
			}
		}
		s := stampOf(v)
		mine := e.stampLine(e.me, s)
		for j := range e.n {
			if j == e.me {
				continue
			}
			if !e.checked[j] {
				if err := e.checkInfo(j); err != nil {
					return err
				}
			}
			if string(e.stampLine(j, s)) != string(mine) {
				return e.mismatch(mine, j, s)
			}
		}
		e.heldHead = (e.heldHead + 1) % stamps
		e.heldLen--
	}
	return nil
}
