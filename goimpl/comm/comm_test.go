package comm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/internal/reftest"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/rendezvous"
	"github.com/gohccl/gohccl/goimpl/transport"
	"github.com/gohccl/gohccl/goimpl/transport/inproc"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// smallBuffers makes segments of 16 KiB, so that modest counts already
// stream through several segments.
func smallBuffers() config.Config {
	c := config.Default()
	c.BuffSize = config.MinBuffSize
	return c
}

// world runs f on every rank of an in-process group of n goroutine ranks
// and returns each rank's error.
func world(t *testing.T, n int, f func(c *Comm) error) []error {
	t.Helper()
	meshes := inproc.NewWorld(n)
	comms := make([]*Comm, n)
	for r := range comms {
		c, err := FromMesh(meshes[r], Options{Rank: r, Size: n, Timeout: 20 * time.Second, Config: smallBuffers()})
		require.NoError(t, err)
		comms[r] = c
	}
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	return runAll(comms, f)
}

func runAll(comms []*Comm, f func(c *Comm) error) []error {
	return reftest.OnRanks(len(comms), func(r int) error { return f(comms[r]) })
}

func noErrors(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

var worldSizes = []int{1, 2, 3, 4, 5, 7, 8, 13, 16}

func countsFor(n int) []int {
	return []int{0, 1, n - 1, n + 1, 1001, 20011}
}

func TestAllReduce(t *testing.T) {
	for _, n := range worldSizes {
		for _, dt := range []reduce.DType{reduce.Int32, reduce.Float64, reduce.Float32, reduce.Int64} {
			for _, op := range []reduce.Op{reduce.Sum, reduce.Max, reduce.Min} {
				for _, count := range countsFor(n) {
					t.Run(fmt.Sprintf("n%d/%s/%s/%d", n, dt, op, count), func(t *testing.T) {
						inputs := make([][]int64, n)
						bufs := make([][]byte, n)
						for r := range inputs {
							inputs[r] = reftest.Ints(r, count, 1)
							bufs[r] = reftest.Encode(dt, inputs[r])
						}
						noErrors(t, world(t, n, func(c *Comm) error {
							return c.AllReduce(bufs[c.Rank()], count, dt, op, 0)
						}))
						want := reftest.Encode(dt, reftest.Reduce(op, inputs))
						for r := range bufs {
							require.Equal(t, want, bufs[r], "rank %d", r)
						}
					})
				}
			}
		}
	}
}

// TestAllReduceBitwiseIdentical checks that every rank ends with the same
// bits when float sums do depend on order.
func TestAllReduceBitwiseIdentical(t *testing.T) {
	for _, n := range []int{3, 5, 8} {
		count := 50021
		bufs := make([][]byte, n)
		for r := range bufs {
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			bufs[r] = make([]byte, 4*count)
			for i := 0; i < count; i++ {
				binary.LittleEndian.PutUint32(bufs[r][4*i:], math.Float32bits(rng.Float32()*1e3))
			}
		}
		noErrors(t, world(t, n, func(c *Comm) error {
			return c.AllReduce(bufs[c.Rank()], count, reduce.Float32, reduce.Sum, 0)
		}))
		for r := 1; r < n; r++ {
			require.Equal(t, bufs[0], bufs[r], "n=%d rank %d differs from rank 0", n, r)
		}
	}
}

func TestAllReduceAvg(t *testing.T) {
	n, count := 4, 103
	bufs := make([][]byte, n)
	inputs := make([][]int64, n)
	for r := range bufs {
		inputs[r] = reftest.Ints(r, count, 3)
		bufs[r] = reftest.Encode(reduce.Float64, inputs[r])
	}
	noErrors(t, world(t, n, func(c *Comm) error {
		return c.AllReduce(bufs[c.Rank()], count, reduce.Float64, reduce.Avg, 0)
	}))
	sum := reftest.Reduce(reduce.Sum, inputs)
	for i := 0; i < count; i++ {
		got := math.Float64frombits(binary.LittleEndian.Uint64(bufs[2][8*i:]))
		assert.Equal(t, float64(sum[i])/float64(n), got)
	}
}

func TestBroadcastAndReduce(t *testing.T) {
	for _, n := range worldSizes {
		for _, count := range []int{0, 1, 777, 100003} {
			for root := 0; root < n; root += max(1, n/3) {
				t.Run(fmt.Sprintf("n%d/%d/root%d", n, count, root), func(t *testing.T) {
					inputs := make([][]int64, n)
					bufs := make([][]byte, n)
					for r := range bufs {
						inputs[r] = reftest.Ints(r, count, 5)
						bufs[r] = reftest.Encode(reduce.Int32, inputs[r])
					}
					noErrors(t, world(t, n, func(c *Comm) error {
						return c.Broadcast(bufs[c.Rank()], count, reduce.Int32, root, 0)
					}))
					want := reftest.Encode(reduce.Int32, inputs[root])
					for r := range bufs {
						require.Equal(t, want, bufs[r], "broadcast rank %d", r)
					}

					for r := range bufs {
						bufs[r] = reftest.Encode(reduce.Int32, inputs[r])
					}
					noErrors(t, world(t, n, func(c *Comm) error {
						return c.Reduce(bufs[c.Rank()], count, reduce.Int32, reduce.Sum, root, 0)
					}))
					require.Equal(t, reftest.Encode(reduce.Int32, reftest.Reduce(reduce.Sum, inputs)), bufs[root], "reduce at root")
					for r := range bufs {
						if r != root {
							require.Equal(t, reftest.Encode(reduce.Int32, inputs[r]), bufs[r], "non-root %d modified", r)
						}
					}
				})
			}
		}
	}
}

func TestAllGatherReduceScatter(t *testing.T) {
	for _, n := range worldSizes {
		for _, count := range []int{0, 1, 5, 10007} {
			t.Run(fmt.Sprintf("n%d/%d", n, count), func(t *testing.T) {
				ins := make([][]byte, n)
				outs := make([][]byte, n)
				want := []byte{}
				for r := range ins {
					ins[r] = reftest.Encode(reduce.Int64, reftest.Ints(r, count, 9))
					outs[r] = make([]byte, n*len(ins[r]))
					want = append(want, ins[r]...)
				}
				noErrors(t, world(t, n, func(c *Comm) error {
					return c.AllGather(ins[c.Rank()], outs[c.Rank()], count, reduce.Int64, 0)
				}))
				for r := range outs {
					require.Equal(t, want, outs[r], "allgather rank %d", r)
				}

				inputs := make([][]int64, n)
				for r := range ins {
					inputs[r] = reftest.Ints(r, n*count, 11)
					ins[r] = reftest.Encode(reduce.Int64, inputs[r])
					outs[r] = make([]byte, 8*count)
				}
				noErrors(t, world(t, n, func(c *Comm) error {
					return c.ReduceScatter(ins[c.Rank()], outs[c.Rank()], count, reduce.Int64, reduce.Sum, 0)
				}))
				full := reftest.Encode(reduce.Int64, reftest.Reduce(reduce.Sum, inputs))
				for r := range outs {
					require.Equal(t, full[r*8*count:(r+1)*8*count], outs[r], "reduce_scatter rank %d", r)
					require.Equal(t, reftest.Encode(reduce.Int64, inputs[r]), ins[r], "reduce_scatter modified input of rank %d", r)
				}
			})
		}
	}
}

func TestGatherScatter(t *testing.T) {
	for _, n := range []int{1, 2, 3, 6} {
		for _, count := range []int{0, 3, 4099} {
			for root := 0; root < n; root++ {
				ins := make([][]byte, n)
				outs := make([][]byte, n)
				want := []byte{}
				for r := range ins {
					ins[r] = reftest.Encode(reduce.Int32, reftest.Ints(r, count, 13))
					outs[r] = make([]byte, n*len(ins[r]))
					want = append(want, ins[r]...)
				}
				noErrors(t, world(t, n, func(c *Comm) error {
					return c.Gather(ins[c.Rank()], outs[c.Rank()], count, reduce.Int32, root, 0)
				}))
				require.Equal(t, want, outs[root])

				for r := range outs {
					outs[r] = make([]byte, 4*count)
				}
				noErrors(t, world(t, n, func(c *Comm) error {
					var in []byte
					if c.Rank() == root {
						in = want
					}
					return c.Scatter(in, outs[c.Rank()], count, reduce.Int32, root, 0)
				}))
				for r := range outs {
					require.Equal(t, want[r*4*count:(r+1)*4*count], outs[r])
				}
			}
		}
	}
}

func TestAllToAllUneven(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5} {
		// rank s sends (s+d+1)%4 elements to rank d.
		size := func(s, d int) int { return (s + d + 1) % 4 }
		ins := make([][]byte, n)
		outs := make([][]byte, n)
		for r := 0; r < n; r++ {
			var v []int64
			for d := 0; d < n; d++ {
				for i := 0; i < size(r, d); i++ {
					v = append(v, int64(1000*r+10*d+i))
				}
			}
			ins[r] = reftest.Encode(reduce.Int64, v)
		}
		noErrors(t, world(t, n, func(c *Comm) error {
			r := c.Rank()
			sc, so, rc, ro := make([]int, n), make([]int, n), make([]int, n), make([]int, n)
			soff, roff := 0, 0
			for p := 0; p < n; p++ {
				sc[p], so[p] = size(r, p), soff
				rc[p], ro[p] = size(p, r), roff
				soff += sc[p]
				roff += rc[p]
			}
			outs[r] = make([]byte, 8*roff)
			return c.AllToAllV(ins[r], sc, so, outs[r], rc, ro, reduce.Int64, 0)
		}))
		for r := 0; r < n; r++ {
			var v []int64
			for s := 0; s < n; s++ {
				for i := 0; i < size(s, r); i++ {
					v = append(v, int64(1000*s+10*r+i))
				}
			}
			require.Equal(t, reftest.Encode(reduce.Int64, v), outs[r], "n=%d rank %d", n, r)
		}
	}
}

func TestBarrier(t *testing.T) {
	for _, n := range []int{1, 2, 3, 9} {
		noErrors(t, world(t, n, func(c *Comm) error {
			for i := 0; i < 5; i++ {
				if err := c.Barrier(0); err != nil {
					return err
				}
			}
			return nil
		}))
	}
}

func TestSendRecv(t *testing.T) {
	n := 4
	noErrors(t, world(t, n, func(c *Comm) error {
		r := c.Rank()
		// Every rank sends to every other with two tags, receives tag 2
		// first: matching is by tag, in order within a tag.
		for p := 0; p < n; p++ {
			if p == r {
				continue
			}
			for _, tag := range []int64{1, 2} {
				b := reftest.Encode(reduce.Int32, []int64{int64(r), int64(p), tag})
				if err := c.Send(p, tag, b, 3, reduce.Int32, 0); err != nil {
					return err
				}
			}
		}
		for _, tag := range []int64{2, 1} {
			for p := 0; p < n; p++ {
				if p == r {
					continue
				}
				got := make([]byte, 12)
				req, err := c.PostRecv(p, tag, got, 3, reduce.Int32)
				if err != nil {
					return err
				}
				if _, err := c.WaitRecv(req, 0); err != nil {
					return err
				}
				if want := reftest.Encode(reduce.Int32, []int64{int64(p), int64(r), tag}); string(want) != string(got) {
					return fmt.Errorf("rank %d got %v from %d tag %d", r, got, p, tag)
				}
			}
		}
		// Any-source: rank 0 receives one message from each other rank.
		if r == 0 {
			seen := map[int]bool{}
			for i := 1; i < n; i++ {
				got := make([]byte, 4)
				req, err := c.PostRecv(transport.AnySource, 9, got, 1, reduce.Int32)
				if err != nil {
					return err
				}
				src, err := c.WaitRecv(req, 0)
				if err != nil {
					return err
				}
				if int(binary.LittleEndian.Uint32(got)) != src || seen[src] {
					return fmt.Errorf("any-source receive said rank %d, payload %v", src, got)
				}
				seen[src] = true
			}
			return nil
		}
		return c.Send(0, 9, reftest.Encode(reduce.Int32, []int64{int64(r)}), 1, reduce.Int32, 0)
	}))
}

func TestRecvSizeMismatch(t *testing.T) {
	errs := world(t, 2, func(c *Comm) error {
		if c.Rank() == 0 {
			return c.Send(1, 0, make([]byte, 8), 2, reduce.Int32, 0)
		}
		req, err := c.PostRecv(0, 0, make([]byte, 12), 3, reduce.Int32)
		if err != nil {
			return err
		}
		_, err = c.WaitRecv(req, 0)
		return err
	})
	require.ErrorIs(t, errs[1], transport.ErrSize)
	assert.Contains(t, errs[1].Error(), "3 int32 elements")
}

func TestMismatchedCollectives(t *testing.T) {
	errs := world(t, 3, func(c *Comm) error {
		b := make([]byte, 400)
		if c.Rank() == 1 {
			return c.Broadcast(b, 100, reduce.Float32, 0, 5*time.Second)
		}
		return c.AllReduce(b, 100, reduce.Float32, reduce.Sum, 5*time.Second)
	})
	var mismatch int
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		if errors.Is(err, transport.ErrMismatch) {
			mismatch++
			assert.Contains(t, err.Error(), "allreduce")
			assert.Contains(t, err.Error(), "broadcast")
		}
	}
	assert.GreaterOrEqual(t, mismatch, 1)
}

func TestTimeoutNamesOpAndPeer(t *testing.T) {
	start := time.Now()
	errs := world(t, 2, func(c *Comm) error {
		if c.Rank() == 1 {
			time.Sleep(1500 * time.Millisecond)
			return nil
		}
		return c.AllReduce(make([]byte, 40), 10, reduce.Float32, reduce.Sum, 500*time.Millisecond)
	})
	require.ErrorIs(t, errs[0], transport.ErrTimeout)
	assert.Contains(t, errs[0].Error(), "allreduce #1")
	assert.Contains(t, errs[0].Error(), "rank 1")
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestBrokenAfterFailure(t *testing.T) {
	meshes := inproc.NewWorld(2)
	c, err := FromMesh(meshes[0], Options{Rank: 0, Size: 2, Config: smallBuffers()})
	require.NoError(t, err)
	defer c.Close()
	err = c.Barrier(100 * time.Millisecond)
	require.ErrorIs(t, err, transport.ErrTimeout)
	err = c.Barrier(0)
	require.ErrorIs(t, err, ErrBroken)
	assert.Contains(t, err.Error(), "timed out")
}

func TestInvalidArguments(t *testing.T) {
	meshes := inproc.NewWorld(1)
	c, err := FromMesh(meshes[0], Options{Rank: 0, Size: 1, Config: smallBuffers()})
	require.NoError(t, err)
	defer c.Close()
	for name, err := range map[string]error{
		"short buffer":  c.AllReduce(make([]byte, 3), 1, reduce.Float32, reduce.Sum, 0),
		"bitwise float": c.AllReduce(make([]byte, 4), 1, reduce.Float32, reduce.BAnd, 0),
		"root":          c.Broadcast(make([]byte, 4), 1, reduce.Float32, 3, 0),
		"peer":          c.Send(2, 0, make([]byte, 4), 1, reduce.Float32, 0),
	} {
		require.ErrorIs(t, err, ErrInvalid, name)
	}
	require.NoError(t, c.AllReduce(make([]byte, 4), 1, reduce.Float32, reduce.Sum, 0), "usable after invalid input")
}

// TestBootstrapTCP runs the real bootstrap and TCP links between goroutine
// ranks sharing an in-memory store (GOHCCL_TRANSPORT=tcp: ranks of one
// process would otherwise share memory).
func TestBootstrapTCP(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4} {
		store := rendezvous.NewMemStore()
		comms := make([]*Comm, n)
		cfg := smallBuffers()
		cfg.Transport = "tcp"
		errs := reftest.OnRanks(n, func(r int) (err error) {
			comms[r], err = New(rendezvous.Prefixed(store, "g/"), Options{Rank: r, Size: n, Timeout: 10 * time.Second,
				Config: cfg, MasterAddr: "127.0.0.1"})
			return err
		})
		noErrors(t, errs)
		for _, c := range comms {
			require.Nil(t, c.local, "no shared memory under GOHCCL_TRANSPORT=tcp")
			if n > 1 {
				require.Contains(t, c.Describe(), "tcp")
				require.NotContains(t, c.Describe(), "shm")
			}
		}
		count := 30011
		inputs := make([][]int64, n)
		bufs := make([][]byte, n)
		for r := range bufs {
			inputs[r] = reftest.Ints(r, count, 17)
			bufs[r] = reftest.Encode(reduce.Int32, inputs[r])
		}
		noErrors(t, runAll(comms, func(c *Comm) error {
			return c.AllReduce(bufs[c.Rank()], count, reduce.Int32, reduce.Sum, 0)
		}))
		for r := range bufs {
			require.Equal(t, reftest.Encode(reduce.Int32, reftest.Reduce(reduce.Sum, inputs)), bufs[r])
		}
		for _, c := range comms {
			c.Close()
		}
	}
}

// TestBootstrapReusedStore creates two communicators in turn over the same
// store, as destroy_process_group followed by init does.
func TestBootstrapReusedStore(t *testing.T) {
	store := rendezvous.NewMemStore()
	for cycle := 0; cycle < 3; cycle++ {
		comms := make([]*Comm, 2)
		errs := reftest.OnRanks(2, func(r int) error {
			var err error
			comms[r], err = New(store, Options{Rank: r, Size: 2, Timeout: 10 * time.Second, Config: smallBuffers(), MasterAddr: "localhost"})
			return err
		})
		noErrors(t, errs)
		noErrors(t, runAll(comms, func(c *Comm) error { return c.Barrier(0) }))
		for _, c := range comms {
			c.Close()
		}
	}
}

func TestBootstrapMissingRank(t *testing.T) {
	store := rendezvous.NewMemStore()
	start := time.Now()
	_, err := New(store, Options{Rank: 0, Size: 2, Timeout: 700 * time.Millisecond, Config: smallBuffers(), MasterAddr: "127.0.0.1"})
	require.ErrorIs(t, err, ErrBootstrap)
	assert.Contains(t, err.Error(), "rank 1")
	assert.Less(t, time.Since(start), 5*time.Second)
}

// TestCollectivesDoNotAllocate holds the Comm layer to what the mesh engine
// below it already promises: a steady-state collective allocates nothing.
// An allocation per call is invisible in a Go benchmark's timing but, called
// from C a hundred thousand times a second, it wakes the garbage collector,
// whose workers and stop-the-world phases then preempt the rank's thread.
// The world is bootstrapped for real, so on this host the links are shared
// memory and the collectives run the mesh, as under torchrun.
func TestCollectivesDoNotAllocate(t *testing.T) {
	const n = 2
	store := rendezvous.NewMemStore()
	comms := make([]*Comm, n)
	noErrors(t, reftest.OnRanks(n, func(r int) error {
		var err error
		comms[r], err = New(store, Options{Rank: r, Size: n, Timeout: 20 * time.Second, Config: config.Default(), MasterAddr: "127.0.0.1"})
		return err
	}))
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	for _, count := range []int{1024, 256 << 10} {
		bufs := make([][]byte, n)
		outs := make([][]byte, n)
		for r := range bufs {
			bufs[r] = make([]byte, 4*count)
			outs[r] = make([]byte, 4*count*n)
		}
		ops := []struct {
			name string
			run  func(r int) error
		}{
			{"all_reduce", func(r int) error { return comms[r].AllReduce(bufs[r], count, reduce.Float32, reduce.Sum, 0) }},
			{"broadcast", func(r int) error { return comms[r].Broadcast(bufs[r], count, reduce.Float32, 0, 0) }},
			{"all_gather", func(r int) error { return comms[r].AllGather(bufs[r], outs[r], count, reduce.Float32, 0) }},
			{"reduce_scatter", func(r int) error {
				return comms[r].ReduceScatter(outs[r], bufs[r], count, reduce.Float32, reduce.Sum, 0)
			}},
			{"barrier", func(r int) error { return comms[r].Barrier(0) }},
		}
		for _, op := range ops {
			// Two ranks with a core each measure their choices
			// (GOHCCL_TUNE=auto): the steady state starts after the
			// trial, at most 7 candidates x 3 passes x 16 ops.
			const runs, trial = 50, 7 * tune.Passes * tune.SmallRounds
			peer := make(chan error, 1)
			go func() {
				for range trial + runs + 1 { // AllocsPerRun runs f once more to warm up
					if err := op.run(1); err != nil {
						peer <- err
						return
					}
				}
				peer <- nil
			}()
			var err error
			for range trial {
				if err == nil {
					err = op.run(0)
				}
			}
			allocs := testing.AllocsPerRun(runs, func() {
				if err == nil {
					err = op.run(0)
				}
			})
			require.NoError(t, err, "%s of %d elements on rank 0", op.name, count)
			require.NoError(t, <-peer, "%s of %d elements on rank 1", op.name, count)
			require.Zero(t, allocs, "%s of %d elements allocates per call", op.name, count)
		}
	}
}
