// Package flight is the flight recorder: every communicator keeps its last N
// collectives and point-to-point operations in a ring of fixed-size records,
// so that when a job hangs or fails each rank can say what it was doing and
// whom it was waiting for (docs/trace.md).
//
// Terms: a record is one operation as this rank saw it; its id numbers
// every operation of the communicator in issue order (collectives and
// point-to-point alike), its seq is the collective's sequence number (the
// one every frame carries, equal on every rank for the same collective; 0
// for send and receive). The ring holds the newest N records; older ones are
// overwritten and counted as dropped.
//
// Recording allocates nothing: Begin copies a record into the ring, Choose
// and End update it in place. A dump (Snapshot, then Write) allocates, and
// runs only on failure or on request.
package flight

import (
	"sync"
	"time"

	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// State is where an operation stands.
type State uint8

// The states of an operation, in the order it passes through them.
const (
	// Queued: posted but not yet being waited for (a receive posted by
	// irecv whose wait has not begun).
	Queued State = iota
	// Running: begun and not finished.
	Running
	// Done: finished successfully.
	Done
	// Failed: finished with an error.
	Failed
	// Refused: never started, because the communicator was already broken
	// when the caller issued it. Its Seq is the one it would have had: what
	// a rank that arrived after the others gave up was about to run.
	Refused
)

var stateNames = [...]string{"queued", "running", "done", "failed", "refused"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "unknown"
}

// MaxAwaited is how many awaited peers a record lists by rank; NAwaited
// counts them all. A fixed list keeps the record's size independent of the
// group's: the first few silent peers name the problem, and the other
// ranks' dumps say the rest.
const MaxAwaited = 8

// Record is one operation. Its size is fixed; it holds no pointer into the
// caller's memory (Choice points at the static table of schedules).
type Record struct {
	// ID numbers every operation of the communicator from 1, in issue order.
	ID uint64
	// Seq is the collective's sequence number; 0 for send and receive.
	Seq   uint64
	Kind  transport.Kind
	Recv  bool // a point-to-point receive (Kind is KindSend for both sides)
	DType reduce.DType
	Op    reduce.Op
	State State
	// Count is the element count the fingerprint carries (per rank for
	// allgather, gather, scatter and reduce_scatter; 0 for alltoall).
	Count uint64
	// Root is the root of a rooted collective, or -1; Peer is the other
	// rank of a send or receive (-1 for a receive from any rank), or -1.
	Root, Peer int32
	// Tag is the user's tag of a send or receive.
	Tag int64
	// Choice is the schedule the tuner chose (zero for send and receive).
	Choice tune.Choice
	// Start and End are when the operation began and finished: in the
	// ring, monotonic nanoseconds since the recorder was made (reading the
	// monotonic clock costs half a wall-clock reading); in a Snapshot,
	// Unix nanoseconds. End is 0 until the operation finishes.
	Start, End int64
	// NAwaited counts the peers the operation was still waiting for when
	// it failed; the first MaxAwaited of them are in Awaited, ascending.
	NAwaited int32
	Awaited  [MaxAwaited]int32
}

// Recorder is one communicator's ring of records. A nil Recorder records
// nothing (GOHCCL_TRACE_BUFFER=0). Its methods are safe for concurrent use:
// collectives, sends, receives and a dump may run at once.
type Recorder struct {
	mu   sync.Mutex
	ring []Record
	next uint64    // the id of the next record
	base time.Time // what Start and End count from, with its monotonic reading
}

// New returns a recorder keeping the last n records, or nil when n <= 0.
func New(n int) *Recorder {
	if n <= 0 {
		return nil
	}
	return &Recorder{ring: make([]Record, n), next: 1, base: time.Now()}
}

// Capacity returns how many records the ring keeps.
func (r *Recorder) Capacity() int {
	if r == nil {
		return 0
	}
	return len(r.ring)
}

// Begin stores rec as begun at start (its ID, Start and End are assigned
// here) and returns its id for Choose, Start and End. It returns 0 on a nil
// recorder. start is a time the caller has already read (a deadline's), so
// that recording reads no clock.
func (r *Recorder) Begin(rec *Record, start time.Time) uint64 {
	if r == nil {
		return 0
	}
	r.mu.Lock()
	id := r.next
	r.next++
	slot := &r.ring[id%uint64(len(r.ring))]
	*slot = *rec
	slot.ID, slot.Start, slot.End = id, int64(start.Sub(r.base)), 0
	r.mu.Unlock()
	return id
}

// slot returns the record with id, or nil when it was overwritten or never
// was. The caller holds mu.
func (r *Recorder) slot(id uint64) *Record {
	if id == 0 || id >= r.next || r.next-id > uint64(len(r.ring)) {
		return nil
	}
	return &r.ring[id%uint64(len(r.ring))]
}

// Choose records the schedule the tuner chose for operation id.
func (r *Recorder) Choose(id uint64, ch tune.Choice) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if s := r.slot(id); s != nil {
		s.Choice = ch
	}
	r.mu.Unlock()
}

// Start marks a queued operation running (a receive whose wait begins).
func (r *Recorder) Start(id uint64) {
	if r == nil {
		return
	}
	r.mu.Lock()
	if s := r.slot(id); s != nil && s.State == Queued {
		s.State = Running
	}
	r.mu.Unlock()
}

// End finishes operation id as Done, or Failed when failed, with the peers
// it still awaited (ignored unless failed; any order, duplicates and
// out-of-range ranks are the caller's to avoid).
func (r *Recorder) End(id uint64, failed bool, awaited []int) {
	if r == nil {
		return
	}
	now := int64(time.Since(r.base))
	r.mu.Lock()
	if s := r.slot(id); s != nil {
		s.End = now
		if s.State != Refused {
			s.State = Done
		}
		if failed {
			s.State = Failed
			s.NAwaited = int32(len(awaited))
			for i, p := range awaited[:min(len(awaited), MaxAwaited)] {
				s.Awaited[i] = int32(p)
			}
		}
	}
	r.mu.Unlock()
}

// Snapshot returns a copy of the records in the ring, oldest first, with
// Unix times, and how many older records were overwritten.
func (r *Recorder) Snapshot() (recs []Record, dropped uint64) {
	if r == nil {
		return nil, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	last := r.next - 1 // the newest id
	n := min(last, uint64(len(r.ring)))
	recs = make([]Record, 0, n)
	wall := r.base.UnixNano()
	for id := last - n + 1; id <= last; id++ {
		rec := r.ring[id%uint64(len(r.ring))]
		rec.Start += wall
		if rec.State >= Done {
			rec.End += wall
		} else {
			rec.End = 0
		}
		recs = append(recs, rec)
	}
	return recs, last - n
}
