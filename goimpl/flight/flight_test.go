package flight

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
	"github.com/gohccl/gohccl/goimpl/tune"
)

func collective(seq uint64, count uint64) *Record {
	return &Record{Seq: seq, Kind: transport.KindAllReduce, DType: reduce.Float32, Op: reduce.Sum,
		Count: count, Root: -1, Peer: -1, State: Running}
}

func TestNilRecorderRecordsNothing(t *testing.T) {
	var r *Recorder = New(0)
	require.Nil(t, r)
	id := r.Begin(collective(1, 4), time.Now())
	assert.Zero(t, id)
	r.Choose(id, tune.Choice{})
	r.End(id, true, []int{1})
	recs, dropped := r.Snapshot()
	assert.Empty(t, recs)
	assert.Zero(t, dropped)
	assert.Zero(t, r.Capacity())
}

// TestRingKeepsTheNewest fills rings of several capacities with more and
// fewer records than they hold and checks the snapshot against the list of
// what was recorded: the newest min(n, cap), oldest first, with their
// states, and the count of the rest as dropped.
func TestRingKeepsTheNewest(t *testing.T) {
	for _, capacity := range []int{1, 2, 7, 64} {
		for _, n := range []int{0, 1, capacity - 1, capacity, capacity + 1, 3*capacity + 2} {
			if n < 0 {
				continue
			}
			r := New(capacity)
			for i := 1; i <= n; i++ {
				id := r.Begin(collective(uint64(i), uint64(10*i)), time.Now())
				require.Equal(t, uint64(i), id)
				if i%3 != 0 { // every third stays running
					r.End(id, i%5 == 0, []int{i % 4})
				}
			}
			recs, dropped := r.Snapshot()
			keep := min(n, capacity)
			require.Len(t, recs, keep, "cap %d n %d", capacity, n)
			assert.Equal(t, uint64(n-keep), dropped)
			for j, rec := range recs {
				i := n - keep + 1 + j
				assert.Equal(t, uint64(i), rec.ID)
				assert.Equal(t, uint64(i), rec.Seq)
				assert.Equal(t, uint64(10*i), rec.Count)
				want := Done
				switch {
				case i%3 == 0:
					want = Running
				case i%5 == 0:
					want = Failed
				}
				assert.Equal(t, want, rec.State, "record %d", i)
				if want == Failed {
					assert.Equal(t, int32(1), rec.NAwaited)
					assert.Equal(t, int32(i%4), rec.Awaited[0])
				} else {
					assert.Zero(t, rec.NAwaited)
				}
				if want == Running {
					assert.Zero(t, rec.End)
				} else {
					assert.GreaterOrEqual(t, rec.End, rec.Start)
				}
			}
		}
	}
}

// TestEndOfAnOverwrittenRecord: an operation that outlives capacity newer
// ones must not write into the record that now holds its slot.
func TestEndOfAnOverwrittenRecord(t *testing.T) {
	r := New(2)
	old := r.Begin(collective(1, 1), time.Now())
	r.Begin(collective(2, 2), time.Now())
	r.Begin(collective(3, 3), time.Now()) // overwrites id 1's slot
	r.End(old, true, []int{5})
	r.Choose(old, tune.Choice{Segment: 99})
	recs, dropped := r.Snapshot()
	require.Len(t, recs, 2)
	assert.Equal(t, uint64(1), dropped)
	assert.Equal(t, uint64(3), recs[1].Seq)
	assert.Equal(t, Running, recs[1].State)
	assert.Zero(t, recs[1].Choice.Segment)
}

func TestAwaitedListIsBounded(t *testing.T) {
	r := New(4)
	id := r.Begin(collective(1, 1), time.Now())
	peers := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}
	r.End(id, true, peers)
	recs, _ := r.Snapshot()
	e := Entries(recs, time.Now())[0]
	assert.Equal(t, peers[:MaxAwaited], e.Awaited)
	assert.Equal(t, len(peers)-MaxAwaited, e.AwaitedMore)
	assert.Equal(t, "failed", e.State)
}

func TestQueuedReceiveStarts(t *testing.T) {
	r := New(4)
	id := r.Begin(&Record{Kind: transport.KindSend, Recv: true, DType: reduce.Int32, Count: 3, Peer: 2, Tag: 7, Root: -1, State: Queued}, time.Now())
	recs, _ := r.Snapshot()
	assert.Equal(t, Queued, recs[0].State)
	r.Start(id)
	recs, _ = r.Snapshot()
	assert.Equal(t, Running, recs[0].State)
	r.End(id, false, nil)
	recs, _ = r.Snapshot()
	e := Entries(recs, time.Now())[0]
	assert.Equal(t, "recv", e.Kind)
	assert.Equal(t, "done", e.State)
	require.NotNil(t, e.Peer)
	assert.Equal(t, int32(2), *e.Peer)
	assert.Equal(t, int64(7), *e.Tag)
	assert.Nil(t, e.Root)
	assert.Empty(t, e.Algo)
}

// TestConcurrentRecording runs recorders from several goroutines with
// snapshots beside them (meant for -race) and checks that every id was
// handed out once.
func TestConcurrentRecording(t *testing.T) {
	r := New(16)
	const workers, each = 4, 500
	ids := make([][]uint64, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				id := r.Begin(collective(uint64(i), 1), time.Now())
				r.Choose(id, tune.Choice{Segment: i})
				r.End(id, false, nil)
				ids[w] = append(ids[w], id)
			}
		}()
	}
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
				r.Snapshot()
			}
		}
	}()
	wg.Wait()
	close(stop)
	seen := map[uint64]bool{}
	for _, l := range ids {
		for _, id := range l {
			require.False(t, seen[id], "id %d twice", id)
			seen[id] = true
		}
	}
	assert.Len(t, seen, workers*each)
	recs, dropped := r.Snapshot()
	assert.Len(t, recs, 16)
	assert.Equal(t, uint64(workers*each-16), dropped)
}

func TestWriteDump(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new", "dir")
	r := New(8)
	id := r.Begin(&Record{Seq: 1, Kind: transport.KindBroadcast, DType: reduce.Float64, Count: 5, Root: 2, Peer: -1, State: Running}, time.Now())
	r.End(id, false, nil)
	r.Begin(collective(2, 1024), time.Now())
	recs, dropped := r.Snapshot()
	d := &Dump{Version: Version, Rank: 1, Size: 3, Group: "ab/c d", Host: "node 7", Reason: "request",
		Buffer: r.Capacity(), Dropped: dropped, Entries: Entries(recs, time.Now())}
	path, err := Write(dir, d)
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(dir, "gohccl_trace_ab_c_d_rank1_node_7.json"), path)
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var back map[string]any
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.Equal(t, float64(1), back["rank"])
	entries := back["entries"].([]any)
	require.Len(t, entries, 2)
	first, second := entries[0].(map[string]any), entries[1].(map[string]any)
	assert.Equal(t, "broadcast", first["kind"])
	assert.Equal(t, float64(2), first["root"])
	assert.Equal(t, "done", first["state"])
	assert.NotContains(t, first, "op")
	assert.Equal(t, "allreduce", second["kind"])
	assert.Equal(t, "sum", second["op"])
	assert.Equal(t, "running", second["state"])
	assert.NotContains(t, second, "root")
	left, err := filepath.Glob(filepath.Join(dir, ".gohccl_trace_*"))
	require.NoError(t, err)
	assert.Empty(t, left, "temporary files left behind")

	_, err = Write("", d)
	assert.ErrorContains(t, err, "no directory")
}

// BenchmarkRecord is one collective's recording: begin, choice, end.
// -benchmem shows it allocates nothing.
func BenchmarkRecord(b *testing.B) {
	r := New(2000)
	rec := collective(1, 1024)
	start := time.Now()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		rec.Seq = uint64(i)
		id := r.Begin(rec, start)
		r.Choose(id, tune.Choice{Segment: 1})
		r.End(id, false, nil)
	}
}

// TestTimesAreWallClock: a snapshot's times are Unix nanoseconds between
// the readings taken around the operation.
func TestTimesAreWallClock(t *testing.T) {
	r := New(4)
	before := time.Now()
	id := r.Begin(collective(1, 1), time.Now())
	time.Sleep(2 * time.Millisecond)
	r.End(id, false, nil)
	after := time.Now()
	recs, _ := r.Snapshot()
	rec := recs[0]
	assert.GreaterOrEqual(t, rec.Start, before.UnixNano()-int64(time.Millisecond))
	assert.GreaterOrEqual(t, rec.End-rec.Start, int64(2*time.Millisecond))
	assert.LessOrEqual(t, rec.End, after.UnixNano()+int64(time.Millisecond))
}
