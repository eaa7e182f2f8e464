package comm

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/internal/reftest"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/rendezvous"
	"github.com/gohccl/gohccl/goimpl/transport/inproc"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// TestTableSweep runs every choice of goimpl/tune's table that can run
// (every row, each level pair of the hierarchical rows, the smallest and
// largest segment) on every transport (in-process, shared memory, TCP), at
// world sizes 1 to 16, one node and nodes of several ranks, for counts 0,
// 1, odd and large, against references computed from every rank's input. A
// new row is swept here without a test of its own. -short sweeps fewer
// sizes.
func TestTableSweep(t *testing.T) {
	sizes := []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	if testing.Short() {
		sizes = []int{1, 2, 3, 4, 6, 8}
	}
	for _, transport := range []string{"inproc", "shm", "tcp"} {
		for _, n := range sizes {
			for _, perNode := range nodeSizes(n) {
				t.Run(fmt.Sprintf("%s/n%d/k%d", transport, n, perNode), func(t *testing.T) {
					comms := sweepWorld(t, transport, n, perNode)
					ran := sweep(t, comms)
					// Shared memory runs the engine's rows: whole on one
					// node, as level0 on nodes.
					switch {
					case transport == "shm" && n > 1 && perNode == 0:
						require.True(t, ran["mesh.oneshot"], "the engine ran on one node: %v", ran)
						require.True(t, ran["mesh.eager"], "the eager broadcast ran on one node: %v", ran)
					case transport == "shm" && perNode > 0:
						require.True(t, ran["level0:mesh;level1:ring"], "the engine ran level0: %v", ran)
					}
				})
			}
		}
	}
}

// nodeSizes is one node of n, and nodes of the largest proper divisor of n
// of two or more ranks, where there is one.
func nodeSizes(n int) []int {
	ks := []int{0}
	for d := n / 2; d >= 2; d-- {
		if n%d == 0 {
			return append(ks, d)
		}
	}
	return ks
}

// sweepWorld makes n communicators, goroutine ranks of this process, over
// transport; perNode > 0 makes nodes of that many consecutive ranks (on
// shared memory each node gets its own engine).
func sweepWorld(t *testing.T, transport string, n, perNode int) []*Comm {
	t.Helper()
	cfg := smallBuffers()
	cfg.RanksPerNode = perNode
	comms := make([]*Comm, n)
	var errs []error
	if transport == "inproc" {
		meshes := inproc.NewWorld(n)
		errs = reftest.OnRanks(n, func(r int) (err error) {
			comms[r], err = FromMesh(meshes[r], Options{Rank: r, Size: n, Timeout: 30 * time.Second, Config: cfg})
			return err
		})
	} else {
		cfg.Transport = map[string]string{"shm": "shm", "tcp": "tcp"}[transport]
		store := rendezvous.NewMemStore()
		errs = reftest.OnRanks(n, func(r int) (err error) {
			comms[r], err = New(store, Options{Rank: r, Size: n, Timeout: 30 * time.Second, Config: cfg, MasterAddr: "127.0.0.1"})
			return err
		})
	}
	t.Cleanup(func() {
		for _, c := range comms {
			if c != nil {
				c.Close()
			}
		}
	})
	noErrors(t, errs)
	return comms
}

// sweep runs every runnable choice of every collective on comms and
// returns the names of those that ran.
func sweep(t *testing.T, comms []*Comm) map[string]bool {
	ran := map[string]bool{}
	n := len(comms)
	tu := comms[0].tuner
	m, s := tu.Model(), tu.Shape()
	for coll := range tune.NumColls {
		cands := m.Candidates(coll, s, tune.Restriction{})
		// Of a streaming row's segments, the largest and the smallest.
		lo, hi := map[string]int{}, map[string]int{}
		for _, c := range cands {
			k := c.Name()
			if v, ok := lo[k]; !ok || c.Segment < v {
				lo[k] = c.Segment
			}
			hi[k] = max(hi[k], c.Segment)
		}
		for _, c := range cands {
			if c.CanRun(s) != nil || c.Segment != lo[c.Name()] && c.Segment != hi[c.Name()] {
				continue
			}
			for _, x := range comms {
				x.pinned[coll] = c
			}
			for _, count := range []int{0, 1, 2*n + 1, 9001} {
				// A row may carry only so much (the eager broadcast):
				// the tuner never prices it past that.
				sized := s
				sized.Bytes = float64(4 * count)
				if c.CanRun(sized) != nil {
					continue
				}
				runSwept(t, comms, coll, count, c.String())
			}
			ran[c.Name()] = true
			for _, x := range comms {
				x.pinned[coll] = tune.Choice{}
				require.Equal(t, c.String(), x.choice.String(), "%s ran the pinned choice", coll)
			}
		}
	}
	return ran
}

// runSwept runs coll with count elements (per block where the collective
// has blocks) on every rank and checks every rank's result.
func runSwept(t *testing.T, comms []*Comm, coll tune.Coll, count int, name string) {
	t.Helper()
	n := len(comms)
	dt, op := reduce.Int32, reduce.Sum
	in := make([][]int64, n)
	bufs, outs := make([][]byte, n), make([][]byte, n)
	per := count
	if coll == tune.ReduceScatter || coll == tune.Scatter {
		per = n * count
	}
	for r := range n {
		in[r] = reftest.Ints(r, per, count+int(coll))
		bufs[r] = reftest.Encode(dt, in[r])
	}
	root := n - 1
	var run func(c *Comm) error
	switch coll {
	case tune.AllReduce:
		run = func(c *Comm) error { return c.AllReduce(bufs[c.Rank()], count, dt, op, 0) }
	case tune.Broadcast:
		run = func(c *Comm) error { return c.Broadcast(bufs[c.Rank()], count, dt, root, 0) }
	case tune.Reduce:
		run = func(c *Comm) error { return c.Reduce(bufs[c.Rank()], count, dt, op, root, 0) }
	case tune.AllGather:
		run = func(c *Comm) error {
			outs[c.Rank()] = make([]byte, n*len(bufs[c.Rank()]))
			return c.AllGather(bufs[c.Rank()], outs[c.Rank()], count, dt, 0)
		}
	case tune.ReduceScatter:
		run = func(c *Comm) error {
			outs[c.Rank()] = make([]byte, 4*count)
			return c.ReduceScatter(bufs[c.Rank()], outs[c.Rank()], count, dt, op, 0)
		}
	case tune.Gather:
		run = func(c *Comm) error {
			outs[c.Rank()] = make([]byte, n*len(bufs[c.Rank()]))
			return c.Gather(bufs[c.Rank()], outs[c.Rank()], count, dt, root, 0)
		}
	case tune.Scatter:
		run = func(c *Comm) error {
			outs[c.Rank()] = make([]byte, 4*count)
			return c.Scatter(bufs[c.Rank()], outs[c.Rank()], count, dt, root, 0)
		}
	case tune.AllToAll:
		run = func(c *Comm) error {
			// Rank r sends r+p+count%3 elements to rank p.
			send, recv := make([]int, n), make([]int, n)
			soff, roff := make([]int, n), make([]int, n)
			total, rtotal := 0, 0
			for p := range n {
				send[p], recv[p] = c.Rank()+p+count%3, p+c.Rank()+count%3
				soff[p], roff[p] = total, rtotal
				total, rtotal = total+send[p], rtotal+recv[p]
			}
			src := reftest.Encode(dt, reftest.Ints(c.Rank(), total, count))
			outs[c.Rank()] = make([]byte, 4*rtotal)
			return c.AllToAllV(src, send, soff, outs[c.Rank()], recv, roff, dt, 0)
		}
	case tune.Barrier:
		run = func(c *Comm) error { return c.Barrier(0) }
	}
	noErrors(t, runAll(comms, run))
	sum := reftest.Reduce(op, in)
	for r := range n {
		var want, got []byte
		switch coll {
		case tune.AllReduce:
			want, got = reftest.Encode(dt, sum), bufs[r]
		case tune.Broadcast:
			want, got = reftest.Encode(dt, in[root]), bufs[r]
		case tune.Reduce:
			want, got = reftest.Encode(dt, in[r]), bufs[r]
			if r == root {
				want = reftest.Encode(dt, sum)
			}
		case tune.AllGather:
			for q := range n {
				want = append(want, reftest.Encode(dt, in[q])...)
			}
			got = outs[r]
		case tune.ReduceScatter:
			want, got = reftest.Encode(dt, sum[r*count:(r+1)*count]), outs[r]
		case tune.Gather:
			if r != root {
				continue
			}
			for q := range n {
				want = append(want, reftest.Encode(dt, in[q])...)
			}
			got = outs[r]
		case tune.Scatter:
			want, got = reftest.Encode(dt, in[root][r*count:(r+1)*count]), outs[r]
		case tune.AllToAll:
			for p := range n {
				all := reftest.Ints(p, sumTo(p, n, count), count)
				off := 0
				for q := range r {
					off += p + q + count%3
				}
				want = append(want, reftest.Encode(dt, all[off:off+p+r+count%3])...)
			}
			got = outs[r]
		default:
			continue
		}
		if string(want) != string(got) {
			require.Equal(t, want, got, "%s %s count %d: rank %d of %d", coll, name, count, r, n)
		}
	}
}

// sumTo is how many elements rank p sends in all in runSwept's all-to-all.
func sumTo(p, n, count int) int {
	total := 0
	for q := range n {
		total += p + q + count%3
	}
	return total
}
