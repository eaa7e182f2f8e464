package shm_test

// This test is in the external package: goimpl/comm imports the link.

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/comm"
	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/internal/reftest"
	"github.com/gohccl/gohccl/goimpl/reduce"
	shmem "github.com/gohccl/gohccl/goimpl/shm"
	"github.com/gohccl/gohccl/goimpl/transport"
	shmlink "github.com/gohccl/gohccl/goimpl/transport/shm"
)

// testRing is small, so that every segment streams through the ring in
// pieces and wraps.
const testRing = 4 << 10

// shmWorld builds n communicators, goroutines of this process, whose links
// are all shared-memory links over one heap region. Local index i is
// communicator rank perm[i], so that the two numberings differ.
func shmWorld(t *testing.T, n, ringBytes int, cfg config.Config) []*comm.Comm {
	t.Helper()
	perm := make([]int, n)
	for i := range perm {
		perm[i] = (i*3 + 1) % n
	}
	if n%3 == 0 {
		for i := range perm {
			perm[i] = n - 1 - i
		}
	}
	region := make([]byte, shmlink.RegionSize(n, ringBytes))
	comms := make([]*comm.Comm, n)
	for i, r := range perm {
		m := transport.NewMatcher(r, n)
		local, err := shmlink.Attach(region, perm, i, ringBytes, m, shmem.DefaultPolicy)
		require.NoError(t, err)
		links := make([]transport.Link, n)
		for j, p := range perm {
			links[p] = local[j]
		}
		mesh := transport.NewMesh(r, links, m)
		c, err := comm.FromMesh(mesh, comm.Options{Rank: r, Size: n, Timeout: 30 * time.Second, Config: cfg})
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

// onEveryRank runs f on every communicator at once and fails on the first
// rank's error.
func onEveryRank(t *testing.T, comms []*comm.Comm, f func(c *comm.Comm) error) {
	t.Helper()
	errs := reftest.OnRanks(len(comms), func(r int) error { return f(comms[r]) })
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// TestCollectivesOverShm runs every collective and point-to-point exchange
// over shared-memory links, under each forced algorithm, against the
// shared reference. The ring is small, so that every segment streams
// through it in pieces and wraps.
func TestCollectivesOverShm(t *testing.T) {
	for _, algo := range []string{"ring", "tree", "dtree", "rhd"} {
		for _, n := range []int{2, 3, 4, 5} {
			t.Run(fmt.Sprintf("%s/n%d", algo, n), func(t *testing.T) {
				cfg := config.Default()
				cfg.BuffSize = config.MinBuffSize
				cfg.Algo = algo
				comms := shmWorld(t, n, testRing, cfg)
				collectives(t, comms, 9001)
			})
		}
	}
}

// TestLargeAllReduceOverShm moves megabytes per rank through rings of the
// benchmarks' size with the default configuration.
func TestLargeAllReduceOverShm(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	n, count := 4, 1<<20
	comms := shmWorld(t, n, 1<<20, config.Default())
	inputs := make([][]int64, n)
	bufs := make([][]byte, n)
	for r := range bufs {
		inputs[r] = reftest.Ints(r, count, 4)
		bufs[r] = reftest.Encode(reduce.Float32, inputs[r])
	}
	onEveryRank(t, comms, func(c *comm.Comm) error {
		return c.AllReduce(bufs[c.Rank()], count, reduce.Float32, reduce.Sum, 0)
	})
	want := reftest.Encode(reduce.Float32, reftest.Reduce(reduce.Sum, inputs))
	for r := range bufs {
		require.Equal(t, want, bufs[r], "rank %d", r)
	}
}

func collectives(t *testing.T, comms []*comm.Comm, count int) {
	n := len(comms)
	inputs := make([][]int64, n)
	bufs := make([][]byte, n)
	reset := func(dt reduce.DType) {
		for r := range bufs {
			bufs[r] = reftest.Encode(dt, inputs[r])
		}
	}
	for r := range inputs {
		inputs[r] = reftest.Ints(r, count, 17)
	}

	reset(reduce.Int32)
	onEveryRank(t, comms, func(c *comm.Comm) error {
		return c.AllReduce(bufs[c.Rank()], count, reduce.Int32, reduce.Sum, 0)
	})
	for r := range bufs {
		require.Equal(t, reftest.Encode(reduce.Int32, reftest.Reduce(reduce.Sum, inputs)), bufs[r], "allreduce rank %d", r)
	}

	root := n - 1
	reset(reduce.Float64)
	onEveryRank(t, comms, func(c *comm.Comm) error {
		return c.Reduce(bufs[c.Rank()], count, reduce.Float64, reduce.Max, root, 0)
	})
	require.Equal(t, reftest.Encode(reduce.Float64, reftest.Reduce(reduce.Max, inputs)), bufs[root], "reduce at root")
	onEveryRank(t, comms, func(c *comm.Comm) error {
		return c.Broadcast(bufs[c.Rank()], count, reduce.Float64, root, 0)
	})
	for r := range bufs {
		require.Equal(t, bufs[root], bufs[r], "broadcast rank %d", r)
	}

	block := count / n
	outs := make([][]byte, n)
	var gathered []byte
	for r := range outs {
		bufs[r] = reftest.Encode(reduce.Int64, inputs[r][:block])
		outs[r] = make([]byte, n*len(bufs[r]))
		gathered = append(gathered, bufs[r]...)
	}
	onEveryRank(t, comms, func(c *comm.Comm) error {
		return c.AllGather(bufs[c.Rank()], outs[c.Rank()], block, reduce.Int64, 0)
	})
	for r := range outs {
		require.Equal(t, gathered, outs[r], "allgather rank %d", r)
	}
	onEveryRank(t, comms, func(c *comm.Comm) error {
		return c.Gather(bufs[c.Rank()], outs[c.Rank()], block, reduce.Int64, 0, 0)
	})
	require.Equal(t, gathered, outs[0], "gather at root 0")
	scattered := make([][]byte, n)
	for r := range scattered {
		scattered[r] = make([]byte, len(bufs[r]))
	}
	onEveryRank(t, comms, func(c *comm.Comm) error {
		return c.Scatter(outs[c.Rank()], scattered[c.Rank()], block, reduce.Int64, 0, 0)
	})
	for r := range scattered {
		require.Equal(t, bufs[r], scattered[r], "scatter rank %d", r)
	}

	reset(reduce.Int32)
	for r := range outs {
		outs[r] = make([]byte, block*4)
	}
	onEveryRank(t, comms, func(c *comm.Comm) error {
		return c.ReduceScatter(bufs[c.Rank()][:n*block*4], outs[c.Rank()], block, reduce.Int32, reduce.Sum, 0)
	})
	sum := reftest.Encode(reduce.Int32, reftest.Reduce(reduce.Sum, inputs))
	for r := range outs {
		require.Equal(t, sum[r*block*4:(r+1)*block*4], outs[r], "reduce_scatter rank %d", r)
	}

	// All-to-all with uneven blocks: rank r sends r+p+1 elements to p.
	counts := func(r, p int) int { return r + p + 1 }
	ins := make([][]byte, n)
	sc, so, rc, ro := make([][]int, n), make([][]int, n), make([][]int, n), make([][]int, n)
	for r := range n {
		sc[r], so[r], rc[r], ro[r] = make([]int, n), make([]int, n), make([]int, n), make([]int, n)
		var sOff, rOff int
		for p := range n {
			sc[r][p], so[r][p] = counts(r, p), sOff
			rc[r][p], ro[r][p] = counts(p, r), rOff
			sOff += counts(r, p)
			rOff += counts(p, r)
		}
		ins[r] = reftest.Encode(reduce.Int64, reftest.Ints(r, sOff, 99))
		outs[r] = make([]byte, 8*rOff)
	}
	onEveryRank(t, comms, func(c *comm.Comm) error {
		r := c.Rank()
		return c.AllToAllV(ins[r], sc[r], so[r], outs[r], rc[r], ro[r], reduce.Int64, 0)
	})
	for r := range n {
		for p := range n {
			want := ins[p][8*so[p][r] : 8*(so[p][r]+sc[p][r])]
			got := outs[r][8*ro[r][p] : 8*(ro[r][p]+rc[r][p])]
			require.Equal(t, want, got, "alltoall block from %d at %d", p, r)
		}
	}

	onEveryRank(t, comms, func(c *comm.Comm) error { return c.Barrier(0) })

	// Point to point: every rank sends to its right neighbour and receives
	// from its left one, with a message larger than a p2p frame would be
	// split at, and one from any source.
	onEveryRank(t, comms, func(c *comm.Comm) error {
		r := c.Rank()
		right, left := (r+1)%n, (r+n-1)%n
		got := make([]byte, len(bufs[left]))
		req, err := c.PostRecv(left, 5, got, count, reduce.Int32)
		if err != nil {
			return err
		}
		if err := c.Send(right, 5, bufs[r], count, reduce.Int32, 0); err != nil {
			return err
		}
		if _, err := c.WaitRecv(req, 0); err != nil {
			return err
		}
		if string(got) != string(bufs[left]) {
			return fmt.Errorf("rank %d got the wrong message from %d", r, left)
		}
		one := make([]byte, 4)
		req, err = c.PostRecv(transport.AnySource, 6, one, 1, reduce.Int32)
		if err != nil {
			return err
		}
		if err := c.Send(right, 6, bufs[r][:4], 1, reduce.Int32, 0); err != nil {
			return err
		}
		src, err := c.WaitRecv(req, 0)
		if err != nil {
			return err
		}
		if src != left || string(one) != string(bufs[left][:4]) {
			return fmt.Errorf("rank %d: any-source receive came from %d", r, src)
		}
		return nil
	})
}
