package comm

import (
	"errors"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gohccl/gohccl/goimpl/flight"
	"github.com/gohccl/gohccl/goimpl/mesh"
	"github.com/gohccl/gohccl/goimpl/transport"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// The flight recorder's hooks (goimpl/flight, docs/trace.md): a collective
// is recorded as running, with the time begin read and the schedule chosen,
// once choose has chosen (every collective calls choose right after begin,
// and recording both at once takes the recorder's lock once instead of
// twice), and its outcome at end; a send when it starts and ends; a receive
// when posted (queued), when its wait starts (running) and when that ends.
// On the first failure that breaks the communicator, each rank writes its
// record to GOHCCL_TRACE_DIR.

// recordCollective records the collective that begin stamped, with the
// schedule chosen for it.
func (c *Comm) recordCollective(ch tune.Choice) {
	if c.flight == nil {
		return
	}
	fp := &c.op.Stamp.Fingerprint
	c.rec = c.flight.Begin(&flight.Record{Seq: c.seq, Kind: fp.Kind, DType: fp.DType, Op: fp.Op, Count: fp.Count,
		Root: rootOf(fp), Peer: -1, State: flight.Running, Choice: ch}, c.started)
}

// rootOf is fp's root for a rooted collective, else -1.
func rootOf(fp *transport.Fingerprint) int32 {
	switch fp.Kind {
	case transport.KindBroadcast, transport.KindReduce, transport.KindGather, transport.KindScatter:
		return fp.Root
	}
	return -1
}

// awaitedBy lists the peers a failed op was still waiting for: the one
// whose receive expired or that the shared-memory wait names, and every peer
// with a receive of the op still posted or failed. recvs are the op's
// receives; only the caller's goroutine touches them.
func (c *Comm) awaitedBy(err error, recvs []transport.Recv) []int {
	var peers []int
	add := func(p int) {
		if p >= 0 && p < c.size && p != c.rank && !slices.Contains(peers, p) {
			peers = append(peers, p)
		}
	}
	var te *transport.RecvTimeoutError
	if errors.As(err, &te) {
		add(te.Peer)
	}
	var me *mesh.TimeoutError
	if errors.As(err, &me) {
		for _, p := range me.Missing {
			if me.Local && c.local != nil && p >= 0 && p < len(c.local.ranks) {
				p = c.local.ranks[p]
			}
			add(p)
		}
	}
	if errors.Is(err, transport.ErrTimeout) {
		for i := range recvs {
			if r := &recvs[i]; r.Pending() || (r.Done() && r.Err() != nil) {
				add(r.Peer)
			}
		}
	}
	slices.Sort(peers)
	return peers
}

// refused records a collective issued on a broken communicator, with the
// sequence number it would have had, and writes the failure dump if none was
// written yet (the failure came from a peer while this rank was elsewhere:
// the dump then shows what it was about to run).
func (c *Comm) refused(fp transport.Fingerprint, err error) {
	if c.flight != nil {
		id := c.flight.Begin(&flight.Record{Seq: c.seq + 1, Kind: fp.Kind, DType: fp.DType, Op: fp.Op,
			Count: fp.Count, Root: rootOf(&fp), Peer: -1, State: flight.Refused}, time.Now())
		c.flight.End(id, false, nil)
	}
	c.dumpOnFailure(err)
}

// traceReason names the kind of failure err is, for a dump.
func traceReason(err error) string {
	reason := "error"
	switch {
	case errors.Is(err, transport.ErrMismatch), errors.Is(err, transport.ErrSize):
		reason = "mismatch"
	case errors.Is(err, transport.ErrTimeout):
		reason = "timeout"
	case errors.Is(err, transport.ErrPeerLost):
		reason = "peer lost"
	}
	var pa *transport.PeerAbortError
	if errors.As(err, &pa) {
		reason += " (reported by a peer)"
	}
	return reason
}

// dumpOnFailure writes the flight record into GOHCCL_TRACE_DIR once, when
// the communicator first breaks.
func (c *Comm) dumpOnFailure(err error) {
	if c.flight == nil || c.cfg.TraceDir == "" || c.closed.Load() || c.dumped.Swap(true) {
		return
	}
	if path, derr := c.DumpTrace(c.cfg.TraceDir, traceReason(err)); derr != nil {
		c.log.Warnf("could not write the flight record: %v", derr)
	} else {
		c.log.Warnf("flight record written to %s", path)
	}
}

// TraceDir returns where this communicator's failures dump its flight record
// (GOHCCL_TRACE_DIR), or "".
func (c *Comm) TraceDir() string { return c.cfg.TraceDir }

// ID returns the communicator's id, the same on every rank of the group.
func (c *Comm) ID() string { return c.id }

// Trace returns the flight record as a dump would write it, with reason.
// It does not wait for the op in progress: it may run while a collective
// hangs.
func (c *Comm) Trace(reason string) *flight.Dump {
	now := time.Now()
	recs, dropped := c.flight.Snapshot()
	d := &flight.Dump{Version: flight.Version, Rank: c.rank, Size: c.size, Group: c.id, PID: os.Getpid(),
		Reason: reason, Links: c.mesh.Classes(), Time: now.UnixNano(), Buffer: c.flight.Capacity(), Dropped: dropped}
	d.Host, _ = os.Hostname()
	for _, h := range c.hosts {
		d.Hosts = append(d.Hosts, strings.SplitN(h, "/", 2)[0])
	}
	if p := c.broken.Load(); p != nil {
		d.Error = (*p).Error()
	}
	for i := len(recs) - 1; i >= 0; i-- {
		if r := &recs[i]; r.Seq > 0 && r.State != flight.Refused {
			d.LastSeq = r.Seq
			if r.State == flight.Running && r.NAwaited == 0 {
				// The collective in progress: whom the matcher still
				// holds a receive for (not the shared-memory engine's
				// waits, which a timeout names).
				var peers []int
				c.mesh.Matcher().Awaiting(func(p int) { peers = append(peers, p) })
				r.NAwaited = int32(len(peers))
				for j, p := range peers[:min(len(peers), flight.MaxAwaited)] {
					r.Awaited[j] = int32(p)
				}
			}
			break
		}
	}
	d.Entries = flight.Entries(recs, now)
	return d
}

// DumpTrace writes the flight record into dir and returns the file's path.
func (c *Comm) DumpTrace(dir, reason string) (string, error) {
	if c.flight == nil {
		return "", errors.New("the flight recorder is off (GOHCCL_TRACE_BUFFER=0)")
	}
	return flight.Write(dir, c.Trace(reason))
}
