package comm

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/internal/reftest"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/rendezvous"
	"github.com/gohccl/gohccl/goimpl/transport/tcp"
)

// TestBootstrapTCPStriped: with GOHCCL_NSOCKS=3 the real bootstrap opens
// three connections per pair, and collectives whose segments are striped
// (1 MiB segments, cut into three parts) and a point-to-point message of
// uneven size give the reference results on 3 ranks.
func TestBootstrapTCPStriped(t *testing.T) {
	const n = 3
	store := rendezvous.NewMemStore()
	comms := make([]*Comm, n)
	cfg := config.Default()
	cfg.Transport = "tcp"
	cfg.NSocks = 3
	noErrors(t, reftest.OnRanks(n, func(r int) (err error) {
		comms[r], err = New(rendezvous.Prefixed(store, "g/"), Options{Rank: r, Size: n, Timeout: 30 * time.Second,
			Config: cfg, MasterAddr: "127.0.0.1"})
		return err
	}))
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	for _, c := range comms {
		for p := 0; p < n; p++ {
			if p != c.Rank() {
				require.Equal(t, 3, c.mesh.LinkTo(p).(*tcp.Link).Stripes(), "rank %d to %d", c.Rank(), p)
			}
		}
	}
	for _, count := range []int{0, 1, 3<<20 + 5} {
		inputs := make([][]int64, n)
		bufs := make([][]byte, n)
		for r := range bufs {
			inputs[r] = reftest.Ints(r, count, 1000)
			bufs[r] = reftest.Encode(reduce.Int32, inputs[r])
		}
		noErrors(t, runAll(comms, func(c *Comm) error {
			return c.AllReduce(bufs[c.Rank()], count, reduce.Int32, reduce.Sum, 0)
		}))
		want := reftest.Encode(reduce.Int32, reftest.Reduce(reduce.Sum, inputs))
		for r := range bufs {
			require.Equal(t, want, bufs[r], "all_reduce of %d on rank %d", count, r)
		}
	}
	// Point to point, 5 MiB + 3 elements: one frame, striped; rank 0 to 2.
	count := 5<<20/4 + 3
	src := reftest.Encode(reduce.Int32, reftest.Ints(7, count, 1<<20))
	noErrors(t, runAll(comms, func(c *Comm) error {
		switch c.Rank() {
		case 0:
			return c.Send(2, 9, src, count, reduce.Int32, 0)
		case 2:
			got := make([]byte, len(src))
			req, err := c.PostRecv(0, 9, got, count, reduce.Int32)
			if err != nil {
				return err
			}
			if _, err := c.WaitRecv(req, 0); err != nil {
				return err
			}
			if string(got) != string(src) {
				return fmt.Errorf("the striped point-to-point message arrived changed")
			}
		}
		return nil
	}))
}

// TestAutoStripes: the automatic connection count follows the cores a rank
// can have, within 1 and 4.
func TestAutoStripes(t *testing.T) {
	for _, c := range []struct{ cores, local, want int }{
		{1, 1, 1}, {2, 1, 1}, {4, 1, 2}, {8, 1, 4}, {64, 1, 4}, {16, 8, 1}, {64, 8, 4}, {0, 0, 1},
	} {
		assert.Equal(t, c.want, tcp.AutoStripes(c.cores, c.local), "%d cores, %d local ranks", c.cores, c.local)
	}
}
