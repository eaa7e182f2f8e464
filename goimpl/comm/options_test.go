package comm

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/internal/reftest"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/rendezvous"
)

// TestOptionsPerCommunicator makes two communicators in one process with
// different settings, as two process groups of one job would be, and checks
// that each keeps its own: the kernel path (GOHCCL_SIMD), the buffer and so
// the engine's chunks (GOHCCL_BUFFSIZE), the wait policy (more local ranks
// than cores waits differently) and GOHCCL_ALGO; and that collectives on
// both, interleaved, give the right results.
func TestOptionsPerCommunicator(t *testing.T) {
	mk := func(n int, conf config.Config) []*Comm {
		store := rendezvous.NewMemStore()
		comms := make([]*Comm, n)
		noErrors(t, reftest.OnRanks(n, func(r int) (err error) {
			comms[r], err = New(store, Options{Rank: r, Size: n, Timeout: 20 * time.Second, Config: conf, MasterAddr: "127.0.0.1"})
			return err
		}))
		t.Cleanup(func() {
			for _, c := range comms {
				c.Close()
			}
		})
		return comms
	}
	ca := smallBuffers()
	ca.SIMD, ca.Algo = reduce.PathScalar, "allreduce=mesh.twophase"
	a := mk(2, ca)
	cb := smallBuffers()
	cb.BuffSize = 8 << 20
	b := mk(runtime.NumCPU()+1, cb) // more ranks than cores

	require.Equal(t, reduce.PathScalar, a[0].path.Name())
	require.Equal(t, reduce.Best().Name(), b[0].path.Name())
	require.NotEqual(t, a[0].local.chunk, b[0].local.chunk, "the engine's chunk follows each buffer")
	wa, wb := a[0].local.engine.Options().Wait, b[0].local.engine.Options().Wait
	require.False(t, wa.Busy.Always, "a core per rank: busy only when the waits see it")
	require.True(t, wb.Busy.Always && wb.Busy.Crowded, "more ranks than cores: always busy")
	require.NotSame(t, wa.Busy, a[1].local.engine.Options().Wait.Busy, "each rank's communicator keeps its own evidence")
	require.Equal(t, "mesh.twophase", a[0].tuner.Choose(0, 1<<20).Name())
	require.NotEqual(t, "mesh.twophase", b[0].tuner.Choose(0, 4<<10).Name(), "one-shot for a small message among oversubscribed ranks")

	for round := range 3 {
		for _, comms := range [][]*Comm{a, b, a} {
			count := 5000 + round
			in := make([][]int64, len(comms))
			bufs := make([][]byte, len(comms))
			for r := range comms {
				in[r] = reftest.Ints(r, count, round)
				bufs[r] = reftest.Encode(reduce.Int64, in[r])
			}
			noErrors(t, runAll(comms, func(c *Comm) error {
				return c.AllReduce(bufs[c.Rank()], count, reduce.Int64, reduce.Sum, 0)
			}))
			for r := range comms {
				require.Equal(t, reftest.Encode(reduce.Int64, reftest.Reduce(reduce.Sum, in)), bufs[r])
			}
		}
	}
	require.Equal(t, reduce.PathScalar, a[1].path.Name(), "b's creation left a's path alone")
	require.False(t, a[1].local.engine.Options().Wait.Busy.Always, "b's creation left a's policy alone")
}
