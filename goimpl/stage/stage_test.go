package stage

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/comm"
	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/device"
	"github.com/gohccl/gohccl/goimpl/device/devicetest"
	"github.com/gohccl/gohccl/goimpl/internal/reftest"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
	"github.com/gohccl/gohccl/goimpl/transport/inproc"
)

// group is n goroutine ranks, each with a communicator over the in-process
// transport and a Stager over one shared fake runtime; rank r stages on
// device r through a stream of its own.
type group struct {
	fake    *devicetest.Fake
	comms   []*comm.Comm
	stagers []*Stager
	places  []Place
}

func newGroup(t testing.TB, kind device.Kind, n int, buffSize int64) *group {
	t.Helper()
	cfg := config.Default()
	cfg.BuffSize = buffSize
	g := &group{fake: devicetest.New(kind)}
	for r, m := range inproc.NewWorld(n) {
		c, err := comm.FromMesh(m, comm.Options{Rank: r, Size: n, Timeout: 20 * time.Second, Config: cfg})
		require.NoError(t, err)
		g.comms = append(g.comms, c)
		g.stagers = append(g.stagers, New(c, g.fake.Runtime()))
		g.places = append(g.places, Place{Device: r, Stream: g.fake.NewStream(r)})
	}
	t.Cleanup(func() { g.close(t) })
	return g
}

// close destroys the group and checks that every pinned buffer was freed.
func (g *group) close(t testing.TB) {
	for r := range g.comms {
		g.comms[r].Close()
		assert.NoError(t, g.stagers[r].Close(), "rank %d", r)
	}
	c := g.fake.Counters()
	assert.Zero(t, c.LivePinned, "pinned allocations left after Close")
	assert.Zero(t, c.Pending, "copies still queued after Close")
}

// run runs f on every rank at once and returns each rank's error.
func (g *group) run(f func(r int, s *Stager, at Place) error) []error {
	errs := make([]error, len(g.comms))
	var wg sync.WaitGroup
	for r := range g.comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(r, g.stagers[r], g.places[r])
		}()
	}
	wg.Wait()
	return errs
}

// alloc allocates device memory on rank r's device holding b (n bytes of
// zeros when b is nil).
func (g *group) alloc(r int, b []byte, n int) device.Ptr {
	if b == nil {
		b = make([]byte, n)
	}
	p := g.fake.Malloc(r, max(len(b), 1))
	g.fake.Write(p, b)
	return p
}

func noErrors(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// inputs is each rank's data: count*blocks small integers.
func inputs(n, count, blocks, salt int) [][]int64 {
	v := make([][]int64, n)
	for r := range v {
		v[r] = reftest.Ints(r, count*blocks, salt)
	}
	return v
}

var (
	kinds      = []device.Kind{device.CUDA, device.ACL}
	worldSizes = []int{1, 2, 3, 4}
	// dtypes: a 4-byte float on one runtime, an 8-byte integer on the
	// other, which keeps the suite short and covers both element sizes.
	dtypes = map[device.Kind][]reduce.DType{device.CUDA: {reduce.Float32}, device.ACL: {reduce.Int64}}
)

// counts include zero, one, odd and, with the 64 KiB buffer of these tests,
// counts that cross many chunks.
func counts(n int) []int { return []int{0, 1, n + 2, 1001, 20011} }

// cases runs body for every runtime, world size, dtype and count.
func cases(t *testing.T, body func(t *testing.T, g *group, dt reduce.DType, count int)) {
	for _, kind := range kinds {
		for _, n := range worldSizes {
			for _, dt := range dtypes[kind] {
				for _, count := range counts(n) {
					t.Run(fmt.Sprintf("%s/n%d/%s/%d", kind, n, dt, count), func(t *testing.T) {
						g := newGroup(t, kind, n, config.MinBuffSize)
						body(t, g, dt, count)
						c := g.fake.Counters()
						assert.Empty(t, c.Violations, "calls the fake runtime refused")
						assert.Zero(t, c.Pending, "copies still queued after the calls returned")
					})
				}
			}
		}
	}
}

// moved checks the bytes the fake copied each way.
func moved(t *testing.T, g *group, down, up int) {
	t.Helper()
	c := g.fake.Counters()
	assert.EqualValues(t, down, c.Down, "bytes copied device to host")
	assert.EqualValues(t, up, c.Up, "bytes copied host to device")
}

func TestAllReduce(t *testing.T) {
	cases(t, func(t *testing.T, g *group, dt reduce.DType, count int) {
		n := len(g.comms)
		for _, op := range []reduce.Op{reduce.Sum, reduce.Max} {
			g.fake.Reset()
			in := inputs(n, count, 1, int(op))
			bufs := make([]device.Ptr, n)
			for r := range bufs {
				bufs[r] = g.alloc(r, reftest.Encode(dt, in[r]), 0)
			}
			noErrors(t, g.run(func(r int, s *Stager, at Place) error {
				return s.AllReduce(at, bufs[r], count, dt, op, 0)
			}))
			want := reftest.Encode(dt, reftest.Reduce(op, in))
			for r := range bufs {
				require.Equal(t, want, g.fake.Read(bufs[r], len(want)), "rank %d %s", r, op)
			}
			moved(t, g, n*len(want), n*len(want))
		}
	})
}

func TestBroadcastAndReduce(t *testing.T) {
	cases(t, func(t *testing.T, g *group, dt reduce.DType, count int) {
		n := len(g.comms)
		root := n - 1
		in := inputs(n, count, 1, 3)
		bufs := make([]device.Ptr, n)
		for r := range bufs {
			bufs[r] = g.alloc(r, reftest.Encode(dt, in[r]), 0)
		}
		noErrors(t, g.run(func(r int, s *Stager, at Place) error {
			return s.Broadcast(at, bufs[r], count, dt, root, 0)
		}))
		want := reftest.Encode(dt, in[root])
		for r := range bufs {
			require.Equal(t, want, g.fake.Read(bufs[r], len(want)), "broadcast, rank %d", r)
		}
		moved(t, g, len(want), (n-1)*len(want))

		g.fake.Reset()
		for r := range bufs {
			g.fake.Write(bufs[r], reftest.Encode(dt, in[r]))
		}
		root = n / 2
		noErrors(t, g.run(func(r int, s *Stager, at Place) error {
			return s.Reduce(at, bufs[r], count, dt, reduce.Sum, root, 0)
		}))
		for r := range bufs {
			want := reftest.Encode(dt, in[r]) // leaves keep their input
			if r == root {
				want = reftest.Encode(dt, reftest.Reduce(reduce.Sum, in))
			}
			require.Equal(t, want, g.fake.Read(bufs[r], len(want)), "reduce, rank %d", r)
		}
		moved(t, g, n*len(want), len(want))
	})
}

func TestAllGatherAndReduceScatter(t *testing.T) {
	cases(t, func(t *testing.T, g *group, dt reduce.DType, count int) {
		n, es := len(g.comms), dt.Size()
		in := inputs(n, count, 1, 5)
		ins, outs := make([]device.Ptr, n), make([]device.Ptr, n)
		for r := range ins {
			ins[r] = g.alloc(r, reftest.Encode(dt, in[r]), 0)
			outs[r] = g.alloc(r, nil, n*count*es)
		}
		noErrors(t, g.run(func(r int, s *Stager, at Place) error {
			return s.AllGather(at, ins[r], outs[r], count, dt, 0)
		}))
		want := reftest.Encode(dt, slices.Concat(in...))
		for r := range outs {
			require.Equal(t, want, g.fake.Read(outs[r], len(want)), "allgather, rank %d", r)
		}
		moved(t, g, n*count*es, n*n*count*es)

		g.fake.Reset()
		full := inputs(n, count, n, 6)
		for r := range ins {
			ins[r] = g.alloc(r, reftest.Encode(dt, full[r]), 0)
			outs[r] = g.alloc(r, nil, count*es)
		}
		noErrors(t, g.run(func(r int, s *Stager, at Place) error {
			return s.ReduceScatter(at, ins[r], outs[r], count, dt, reduce.Sum, 0)
		}))
		sum := reftest.Reduce(reduce.Sum, full)
		for r := range outs {
			want := reftest.Encode(dt, sum[r*count:(r+1)*count])
			require.Equal(t, want, g.fake.Read(outs[r], len(want)), "reduce_scatter, rank %d", r)
		}
		moved(t, g, n*n*count*es, n*count*es)
	})
}

func TestGatherAndScatter(t *testing.T) {
	cases(t, func(t *testing.T, g *group, dt reduce.DType, count int) {
		n, es := len(g.comms), dt.Size()
		root := n - 1
		in := inputs(n, count, 1, 7)
		ins, outs := make([]device.Ptr, n), make([]device.Ptr, n)
		for r := range ins {
			ins[r] = g.alloc(r, reftest.Encode(dt, in[r]), 0)
			if r == root { // leaves pass no output
				outs[r] = g.alloc(r, nil, n*count*es)
			}
		}
		noErrors(t, g.run(func(r int, s *Stager, at Place) error {
			return s.Gather(at, ins[r], outs[r], count, dt, root, 0)
		}))
		want := reftest.Encode(dt, slices.Concat(in...))
		require.Equal(t, want, g.fake.Read(outs[root], len(want)), "gather at root")
		moved(t, g, n*count*es, n*count*es)

		g.fake.Reset()
		root = 0
		full := reftest.Ints(99, n*count, 8)
		for r := range ins {
			ins[r] = 0 // leaves pass no input
			if r == root {
				ins[r] = g.alloc(r, reftest.Encode(dt, full), 0)
			}
			outs[r] = g.alloc(r, nil, count*es)
		}
		noErrors(t, g.run(func(r int, s *Stager, at Place) error {
			return s.Scatter(at, ins[r], outs[r], count, dt, root, 0)
		}))
		for r := range outs {
			want := reftest.Encode(dt, full[r*count:(r+1)*count])
			require.Equal(t, want, g.fake.Read(outs[r], len(want)), "scatter, rank %d", r)
		}
		moved(t, g, n*count*es, n*count*es)
	})
}

// TestAllToAllV sends rank q's block to p of a size that differs per pair,
// at offsets with gaps, so that the pieces of every chunk differ per peer.
func TestAllToAllV(t *testing.T) {
	cases(t, func(t *testing.T, g *group, dt reduce.DType, count int) {
		n, es := len(g.comms), dt.Size()
		size := func(q, p int) int { return count * ((q+2*p)%3 + 1) / 3 } // q sends to p
		type side struct{ counts, offsets []int }
		layout := func(r int, sending bool) (side, int) {
			s := side{make([]int, n), make([]int, n)}
			at := 0
			for p := 0; p < n; p++ {
				if sending {
					s.counts[p] = size(r, p)
				} else {
					s.counts[p] = size(p, r)
				}
				s.offsets[p] = at + 3 // a gap the call must not touch
				at = s.offsets[p] + s.counts[p]
			}
			return s, at
		}
		sends, recvs := make([]side, n), make([]side, n)
		ins, outs := make([]device.Ptr, n), make([]device.Ptr, n)
		data := make([][]int64, n)
		down, up := 0, 0
		for r := 0; r < n; r++ {
			var extent int
			sends[r], extent = layout(r, true)
			data[r] = reftest.Ints(r, extent, 9)
			ins[r] = g.alloc(r, reftest.Encode(dt, data[r]), 0)
			recvs[r], extent = layout(r, false)
			outs[r] = g.alloc(r, nil, extent*es)
			for p := 0; p < n; p++ {
				down += sends[r].counts[p] * es
				up += recvs[r].counts[p] * es
			}
		}
		noErrors(t, g.run(func(r int, s *Stager, at Place) error {
			return s.AllToAllV(at, ins[r], sends[r].counts, sends[r].offsets, outs[r], recvs[r].counts, recvs[r].offsets, dt, 0)
		}))
		for r := 0; r < n; r++ {
			extent := recvs[r].offsets[n-1] + recvs[r].counts[n-1]
			want := make([]int64, extent) // the gaps stay zero
			for q := 0; q < n; q++ {
				from := data[q][sends[q].offsets[r] : sends[q].offsets[r]+sends[q].counts[r]]
				copy(want[recvs[r].offsets[q]:], from)
			}
			require.Equal(t, reftest.Encode(dt, want), g.fake.Read(outs[r], extent*es), "alltoall, rank %d", r)
		}
		moved(t, g, down, up)
	})
}

func TestSendRecvAndBarrier(t *testing.T) {
	cases(t, func(t *testing.T, g *group, dt reduce.DType, count int) {
		n, es := len(g.comms), dt.Size()
		if n < 2 {
			noErrors(t, g.run(func(r int, s *Stager, at Place) error { return s.Barrier(at, 0) }))
			moved(t, g, 0, 0)
			return
		}
		// A ring: each rank sends to the next; odd ranks receive from any
		// source.
		in := inputs(n, count, 1, 10)
		ins, outs := make([]device.Ptr, n), make([]device.Ptr, n)
		for r := range ins {
			ins[r] = g.alloc(r, reftest.Encode(dt, in[r]), 0)
			outs[r] = g.alloc(r, nil, count*es)
		}
		sources := make([]int, n)
		noErrors(t, g.run(func(r int, s *Stager, at Place) error {
			next, prev := (r+1)%n, (r+n-1)%n
			from := prev
			if r%2 == 1 {
				from = transport.AnySource
			}
			if r%2 == 0 { // even ranks send first, so that the ring does not wait on itself
				if err := s.Send(at, next, 42, ins[r], count, dt, 0); err != nil {
					return err
				}
			}
			src, err := s.Recv(at, from, 42, outs[r], count, dt, 0)
			sources[r] = src
			if err != nil || r%2 == 0 {
				return err
			}
			return s.Send(at, next, 42, ins[r], count, dt, 0)
		}))
		for r := range outs {
			prev := (r + n - 1) % n
			assert.Equal(t, prev, sources[r], "rank %d's source", r)
			want := reftest.Encode(dt, in[prev])
			require.Equal(t, want, g.fake.Read(outs[r], len(want)), "recv, rank %d", r)
		}
		moved(t, g, n*count*es, n*count*es)
		noErrors(t, g.run(func(r int, s *Stager, at Place) error { return s.Barrier(at, 0) }))
	})
}

// TestInPlaceAllGather: an allgather whose input is its own block of the
// output, as torch's in-place forms pass it.
func TestInPlaceAllGather(t *testing.T) {
	const n, count = 3, 20011
	g := newGroup(t, device.ACL, n, config.MinBuffSize)
	dt := reduce.Int64
	in := inputs(n, count, 1, 11)
	outs := make([]device.Ptr, n)
	for r := range outs {
		outs[r] = g.alloc(r, nil, n*count*dt.Size())
		g.fake.Write(outs[r].Add(r*count*dt.Size()), reftest.Encode(dt, in[r]))
	}
	noErrors(t, g.run(func(r int, s *Stager, at Place) error {
		return s.AllGather(at, outs[r].Add(r*count*dt.Size()), outs[r], count, dt, 0)
	}))
	want := reftest.Encode(dt, slices.Concat(in...))
	for r := range outs {
		require.Equal(t, want, g.fake.Read(outs[r], len(want)), "rank %d", r)
	}
}

// TestChunksAreCut checks that the messages of the tests above do cross
// several chunks, and that a chunk fits its slot with every area aligned.
func TestChunksAreCut(t *testing.T) {
	g := newGroup(t, device.CUDA, 4, config.MinBuffSize)
	s := g.stagers[0]
	for _, k := range []kind{allReduce, allGather, reduceScatter, gather, scatter} {
		s.call = call{kind: k, count: 20011, dt: reduce.Float32, es: 4}
		require.NoError(t, s.cut())
		assert.Greater(t, s.call.chunks, 3, "%s of 20011 float32 in %d-byte slots", k, s.slotBytes())
		assert.Zero(t, s.call.per*4%align, "%s: chunk boundaries aligned", k)
		for _, r := range []int{0, 2} {
			s.call.root = 2
			s.call.in, s.call.out = 1<<20, 1<<24
			var ch chunk
			ch.down, ch.up = make([]span, 0, 4), make([]span, 0, 4)
			s.c = g.comms[r]
			s.layout(0, &ch)
			for _, sp := range append(ch.down, ch.up...) {
				assert.LessOrEqual(t, sp.host+sp.n, s.slotBytes(), "%s: span inside the slot", k)
				assert.Zero(t, sp.host%align, "%s: slot offset aligned", k)
			}
		}
		s.c = g.comms[0]
	}
}

// TestRuntimeErrorBreaksTheGroup injects a failure into each runtime call
// the pipeline makes, at a call deep into a staged all-reduce, and checks
// that the failing rank's error names the call and its code, that every
// rank returns (none waits out the timeout), that the communicators are
// broken, and that nothing stays queued or allocated.
func TestRuntimeErrorBreaksTheGroup(t *testing.T) {
	for _, kind := range kinds {
		calls := map[device.Kind][]string{
			device.CUDA: {"cudaMemcpyAsync", "cudaStreamSynchronize", "cudaHostAlloc", "cudaSetDevice"},
			device.ACL:  {"aclrtMemcpyAsync", "aclrtSynchronizeStream", "aclrtMallocHost", "aclrtSetDevice"},
		}[kind]
		code := map[device.Kind]int32{device.CUDA: devicetest.CUDAErrorIllegalAddress, device.ACL: devicetest.ACLErrorRTDrvInternal}[kind]
		for _, call := range calls {
			t.Run(fmt.Sprintf("%s/%s", kind, call), func(t *testing.T) {
				const n, count = 3, 20011
				g := newGroup(t, kind, n, config.MinBuffSize)
				bufs := make([]device.Ptr, n)
				for r := range bufs {
					bufs[r] = g.alloc(r, reftest.Encode(reduce.Float32, reftest.Ints(r, count, 1)), 0)
				}
				nth := 7
				if call == "cudaHostAlloc" || call == "aclrtMallocHost" || call == "aclrtSetDevice" {
					nth = 2 // one of the ranks' first calls
				}
				if call == "cudaSetDevice" {
					nth = 1
				}
				g.fake.Inject(call, nth, code)
				start := time.Now()
				errs := g.run(func(r int, s *Stager, at Place) error {
					return s.AllReduce(at, bufs[r], count, reduce.Float32, reduce.Sum, 15*time.Second)
				})
				assert.Less(t, time.Since(start), 10*time.Second, "a rank waited for its timeout")
				named := 0
				for r, err := range errs {
					require.Error(t, err, "rank %d", r)
					if errors.Is(err, device.ErrRuntime) {
						named++
						assert.Contains(t, err.Error(), fmt.Sprintf("%s returned %d", call, code))
						assert.Contains(t, err.Error(), "allreduce")
					}
					assert.Error(t, g.comms[r].Err(), "rank %d's communicator is not broken", r)
				}
				assert.Equal(t, 1, named, "ranks whose error names the runtime call: %v", errs)
				assert.Zero(t, g.fake.Counters().Pending, "copies still queued after the calls returned")
				// A later call fails at once.
				err := g.stagers[0].AllReduce(g.places[0], bufs[0], count, reduce.Float32, reduce.Sum, 0)
				assert.ErrorIs(t, err, comm.ErrBroken)
			})
		}
	}
}

// TestInvalidArguments checks that bad arguments are refused before
// anything is copied, and leave the communicator usable.
func TestInvalidArguments(t *testing.T) {
	g := newGroup(t, device.CUDA, 1, config.MinBuffSize)
	s, at := g.stagers[0], g.places[0]
	buf := g.alloc(0, nil, 64)
	for name, err := range map[string]error{
		"dtype":     s.AllReduce(at, buf, 4, reduce.DType(99), reduce.Sum, 0),
		"op":        s.AllReduce(at, buf, 4, reduce.Float32, reduce.BXor, 0),
		"count":     s.AllReduce(at, buf, -1, reduce.Float32, reduce.Sum, 0),
		"null":      s.AllReduce(at, 0, 4, reduce.Float32, reduce.Sum, 0),
		"root":      s.Broadcast(at, buf, 4, reduce.Float32, 1, 0),
		"device":    s.AllReduce(Place{Device: -1}, buf, 4, reduce.Float32, reduce.Sum, 0),
		"peer":      s.Send(at, 3, 0, buf, 4, reduce.Float32, 0),
		"alltoall":  s.AllToAllV(at, buf, []int{1, 1}, []int{0, 1}, buf, []int{1}, []int{0}, reduce.Float32, 0),
		"nullgathr": s.Gather(at, buf, 0, 4, reduce.Float32, 0, 0),
	} {
		assert.ErrorIs(t, err, comm.ErrInvalid, name)
	}
	assert.Zero(t, g.fake.Counters().Copies)
	require.NoError(t, g.comms[0].Err())
	require.NoError(t, s.AllReduce(at, buf, 16, reduce.Float32, reduce.Sum, 0))
}

// TestBuffSizeTooSmall: a group too large for its slots is refused with the
// variable's name, not staged into an overflowing slot.
func TestBuffSizeTooSmall(t *testing.T) {
	g := newGroup(t, device.ACL, 1, config.MinBuffSize)
	s := g.stagers[0]
	s.buffSize = 3 * 64 // as if 1000 ranks shared 64 KiB slots
	err := s.AllGather(g.places[0], g.alloc(0, nil, 128), g.alloc(0, nil, 128), 16, reduce.Int64, 0)
	assert.ErrorIs(t, err, comm.ErrInvalid)
	assert.ErrorContains(t, err, "GOHCCL_BUFFSIZE")
}

// TestStreamOrder: a staged call sees what was queued on its stream before
// it (the fake's copies run in issue order behind a slow one).
func TestStreamOrder(t *testing.T) {
	g := newGroup(t, device.CUDA, 1, config.MinBuffSize)
	g.fake.SetDelay(20 * time.Millisecond)
	rt, at := g.fake.Runtime(), g.places[0]
	src, err := rt.AllocHost(256)
	require.NoError(t, err)
	defer func() { require.NoError(t, rt.FreeHost(src)) }()
	for i := range src {
		src[i] = byte(i)
	}
	buf := g.alloc(0, nil, 256)
	// The caller's own copy, queued on the stream and still running when
	// the collective starts.
	_, err = rt.SetDevice(0)
	require.NoError(t, err)
	require.NoError(t, rt.CopyToDevice(buf, src, at.Stream))
	require.NoError(t, g.stagers[0].AllReduce(at, buf, 256, reduce.Uint8, reduce.Sum, 0))
	assert.Equal(t, []byte(src), g.fake.Read(buf, 256))
}

// TestCloseFreesAndRefuses: Close frees the pinned buffer; a later call is
// refused, not staged into freed memory.
func TestCloseFreesAndRefuses(t *testing.T) {
	g := newGroup(t, device.ACL, 2, config.MinBuffSize)
	bufs := []device.Ptr{g.alloc(0, nil, 64), g.alloc(1, nil, 64)}
	noErrors(t, g.run(func(r int, s *Stager, at Place) error {
		return s.AllReduce(at, bufs[r], 16, reduce.Int32, reduce.Sum, 0)
	}))
	assert.Equal(t, 2, g.fake.Counters().LivePinned)
	for r := range g.comms {
		g.comms[r].Close()
		require.NoError(t, g.stagers[r].Close())
	}
	assert.Zero(t, g.fake.Counters().LivePinned)
	err := g.stagers[0].AllReduce(g.places[0], bufs[0], 16, reduce.Int32, reduce.Sum, 0)
	assert.Error(t, err)
	assert.Zero(t, g.fake.Counters().LivePinned)
}
