package comm

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/flight"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
	"github.com/gohccl/gohccl/goimpl/transport/inproc"
)

// traceWorld makes n in-process communicators that dump into dir.
func traceWorld(t *testing.T, n int, dir string, entries int) []*Comm {
	t.Helper()
	cfg := smallBuffers()
	cfg.TraceDir, cfg.TraceBuffer = dir, entries
	comms := make([]*Comm, n)
	for r, m := range inproc.NewWorld(n) {
		c, err := FromMesh(m, Options{Rank: r, Size: n, Timeout: 10 * time.Second, Config: cfg,
			Hosts: []string{"hostA/boot", "hostA/boot", "hostB/boot", "hostB/boot"}[:n]})
		require.NoError(t, err)
		comms[r] = c
	}
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

func readDump(t *testing.T, dir string, c *Comm) flight.Dump {
	t.Helper()
	host, _ := os.Hostname()
	raw, err := os.ReadFile(filepath.Join(dir, flight.FileName(c.ID(), c.Rank(), host)))
	require.NoError(t, err, "rank %d wrote no dump", c.Rank())
	var d flight.Dump
	require.NoError(t, json.Unmarshal(raw, &d))
	return d
}

// TestTraceRecordsEveryOp runs a sequence of collectives and a send/receive
// pair and checks each rank's record against the list of what it issued.
func TestTraceRecordsEveryOp(t *testing.T) {
	comms := traceWorld(t, 3, "", 64)
	noErrors(t, runAll(comms, func(c *Comm) error {
		b := make([]byte, 4*12)
		if err := c.AllReduce(b, 12, reduce.Float32, reduce.Max, 0); err != nil {
			return err
		}
		if err := c.Broadcast(b[:8], 1, reduce.Float64, 2, 0); err != nil {
			return err
		}
		if err := c.AllGather(b[:4], b[:12], 1, reduce.Int32, 0); err != nil {
			return err
		}
		switch c.Rank() {
		case 0:
			return c.Send(1, 9, b[:6], 3, reduce.Int16, 0)
		case 1:
			r, err := c.PostRecv(0, 9, b[:6], 3, reduce.Int16)
			if err != nil {
				return err
			}
			_, err = c.WaitRecv(r, 0)
			return err
		}
		return nil
	}))
	for _, c := range comms {
		d := c.Trace("request")
		assert.Equal(t, c.Rank(), d.Rank)
		assert.Equal(t, 3, d.Size)
		assert.Equal(t, []string{"hostA", "hostA", "hostB"}, d.Hosts)
		assert.Empty(t, d.Error)
		want := []struct {
			seq         uint64
			kind, dtype string
			count       uint64
			root, peer  int32
			op          string
		}{
			{1, "allreduce", "float32", 12, -1, -1, "max"},
			{2, "broadcast", "float64", 1, 2, -1, ""},
			{3, "allgather", "int32", 1, -1, -1, ""},
		}
		switch c.Rank() {
		case 0:
			want = append(want, struct {
				seq         uint64
				kind, dtype string
				count       uint64
				root, peer  int32
				op          string
			}{0, "send", "int16", 3, -1, 1, ""})
		case 1:
			want = append(want, struct {
				seq         uint64
				kind, dtype string
				count       uint64
				root, peer  int32
				op          string
			}{0, "recv", "int16", 3, -1, 0, ""})
		}
		require.Len(t, d.Entries, len(want), "rank %d", c.Rank())
		for i, w := range want {
			e := d.Entries[i]
			assert.Equal(t, uint64(i+1), e.ID)
			assert.Equal(t, w.seq, e.Seq, "rank %d entry %d", c.Rank(), i)
			assert.Equal(t, w.kind, e.Kind)
			assert.Equal(t, w.dtype, e.DType)
			assert.Equal(t, w.count, e.Count)
			assert.Equal(t, w.op, e.Op)
			assert.Equal(t, "done", e.State)
			assert.GreaterOrEqual(t, e.End, e.Start)
			if w.root >= 0 {
				require.NotNil(t, e.Root)
				assert.Equal(t, w.root, *e.Root)
			} else {
				assert.Nil(t, e.Root)
			}
			if w.peer >= 0 {
				require.NotNil(t, e.Peer)
				assert.Equal(t, w.peer, *e.Peer)
				assert.Empty(t, e.Algo)
			} else {
				assert.NotEmpty(t, e.Algo, "a collective names its schedule")
			}
		}
		assert.Equal(t, uint64(3), d.LastSeq)
	}
}

// TestTraceDumpOnTimeout: rank 2 never enters the second all-reduce; ranks 0
// and 1 time out, write their dumps, and name rank 2 among the awaited. Rank
// 2, told of the failure by their abort frames, writes its own at its next
// call.
func TestTraceDumpOnTimeout(t *testing.T) {
	dir := t.TempDir()
	comms := traceWorld(t, 3, dir, 16)
	awaited := make([][]int, 2)
	errs := runAll(comms, func(c *Comm) error {
		b := make([]byte, 40)
		if err := c.AllReduce(b, 10, reduce.Float32, reduce.Sum, 0); err != nil {
			return err
		}
		if c.Rank() == 2 {
			time.Sleep(1500 * time.Millisecond)
			return c.Barrier(0)
		}
		return c.AllReduce(b, 10, reduce.Float32, reduce.Sum, 400*time.Millisecond)
	})
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
	}
	for _, c := range comms[:2] {
		d := readDump(t, dir, c)
		assert.Contains(t, d.Reason, "timeout", "rank %d", c.Rank())
		assert.NotEmpty(t, d.Error)
		require.Len(t, d.Entries, 2)
		last := d.Entries[1]
		assert.Equal(t, uint64(2), last.Seq)
		assert.Equal(t, "failed", last.State)
		assert.Equal(t, uint64(2), d.LastSeq)
		awaited[c.Rank()] = last.Awaited
	}
	// Each rank names the peer its own schedule waited for (a ring
	// neighbour), not necessarily the culprit: rank 1, or rank 0 if its
	// deadline passed before rank 1's abort reached it. That rank 2 never
	// arrived shows across the dumps (python -m gohccl.trace).
	assert.NotEmpty(t, append(awaited[0], awaited[1]...))
	// Rank 2 never began #2: its barrier, issued after the others gave
	// up, is on record as refused, with the number it would have had.
	d := readDump(t, dir, comms[2])
	require.Len(t, d.Entries, 2)
	assert.Equal(t, "done", d.Entries[0].State)
	assert.Equal(t, flight.Entry{ID: 2, Seq: 2, Kind: "barrier", DType: "uint8", State: "refused"},
		flight.Entry{ID: d.Entries[1].ID, Seq: d.Entries[1].Seq, Kind: d.Entries[1].Kind, DType: d.Entries[1].DType, State: d.Entries[1].State})
	assert.Equal(t, uint64(1), d.LastSeq)
}

// TestTraceDumpOnMismatch: ranks issue different kinds as collective #1;
// every rank dumps, and the records show both kinds.
func TestTraceDumpOnMismatch(t *testing.T) {
	dir := t.TempDir()
	comms := traceWorld(t, 3, dir, 16)
	runAll(comms, func(c *Comm) error {
		b := make([]byte, 400)
		if c.Rank() == 1 {
			return c.Broadcast(b, 100, reduce.Float32, 0, 5*time.Second)
		}
		return c.AllReduce(b, 100, reduce.Float32, reduce.Sum, 5*time.Second)
	})
	kinds := map[string]int{}
	for _, c := range comms {
		// A rank that the others' abort frames reached before it began
		// the collective records it as refused.
		d := readDump(t, dir, c)
		require.Len(t, d.Entries, 1)
		assert.NotEmpty(t, d.Error)
		for _, e := range d.Entries {
			assert.Contains(t, []string{"failed", "refused"}, e.State)
			assert.Equal(t, uint64(1), e.Seq)
			kinds[e.Kind]++
		}
	}
	// The rank that saw the mismatch began its collective, and so did
	// the rank whose frame it saw: both kinds are on record.
	assert.Contains(t, kinds, "allreduce")
	assert.Contains(t, kinds, "broadcast")
}

// TestTraceWhileHung: a dump taken while a collective waits shows it
// running, awaiting the rank that has not arrived.
func TestTraceWhileHung(t *testing.T) {
	comms := traceWorld(t, 2, "", 16)
	done := make(chan error, 1)
	go func() { done <- comms[0].AllReduce(make([]byte, 4), 1, reduce.Int32, reduce.Sum, 5*time.Second) }()
	var e flight.Entry
	require.Eventually(t, func() bool {
		d := comms[0].Trace("request")
		if len(d.Entries) != 1 || d.Entries[0].Awaited == nil {
			return false
		}
		e = d.Entries[0]
		return true
	}, 3*time.Second, 5*time.Millisecond)
	assert.Equal(t, "running", e.State)
	assert.Equal(t, []int{1}, e.Awaited)
	assert.Zero(t, e.End)
	require.NoError(t, comms[1].AllReduce(make([]byte, 4), 1, reduce.Int32, reduce.Sum, 5*time.Second))
	require.NoError(t, <-done)
	assert.Equal(t, "done", comms[0].Trace("request").Entries[0].State)
}

func TestTraceOff(t *testing.T) {
	comms := traceWorld(t, 1, t.TempDir(), 0)
	require.NoError(t, comms[0].Barrier(0))
	_, err := comms[0].DumpTrace(t.TempDir(), "request")
	assert.ErrorContains(t, err, "GOHCCL_TRACE_BUFFER=0")
	assert.Empty(t, comms[0].Trace("request").Entries)
	_ = transport.KindSend
}
