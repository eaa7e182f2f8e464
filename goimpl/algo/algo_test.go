package algo

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/internal/reftest"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
	"github.com/gohccl/gohccl/goimpl/transport/inproc"
)

// testSegment is the streaming unit of these tests, as a communicator with
// config.MinBuffSize (64 KiB) has: moderate counts already take several
// segments.
const testSegment = 16 << 10

// newOps returns one Op per rank of an in-process world of n ranks.
func newOps(t testing.TB, n int, dt reduce.DType, op reduce.Op, seq uint64) []*Op {
	t.Helper()
	k, k3, err := reduce.Lookup(dt, op)
	require.NoError(t, err)
	meshes := inproc.NewWorld(n)
	ops := make([]*Op, n)
	for r := range ops {
		ops[r] = &Op{Mesh: meshes[r], Scratch: make([]byte, 4*testSegment), Segment: testSegment,
			Recvs: make([]transport.Recv, 2*n+2), DType: dt, Kernel: k, Kernel3: k3,
			Stamp:    transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindAllReduce, DType: dt, Op: op}, Seq: seq},
			Deadline: time.Now().Add(20 * time.Second)}
	}
	return ops
}

func runRanks(ops []*Op, f func(o *Op) error) []error {
	errs := make([]error, len(ops))
	var wg sync.WaitGroup
	for r, o := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(o)
		}()
	}
	wg.Wait()
	return errs
}

func noErrs(t *testing.T, errs []error) {
	t.Helper()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
}

// blocked returns the hierarchy of rank r when each k consecutive ranks of n
// form a node (n a multiple of k).
func blocked(r, n, k int) Hierarchy {
	var h Hierarchy
	node, l := r/k, r%k
	for i := 0; i < k; i++ {
		h.Local = append(h.Local, node*k+i)
	}
	for m := 0; m < n/k; m++ {
		h.Cross = append(h.Cross, m*k+l)
	}
	return h
}

type allReduceCase struct {
	name string
	run  func(o *Op, buf []byte, count int) error
	ok   func(n int) bool
}

func allReduceCases() []allReduceCase {
	always := func(int) bool { return true }
	cs := []allReduceCase{
		{"ring", AllReduceRing, always},
		{"tree", AllReduceTree, always},
		{"dtree", AllReduceDoubleTree, always},
		{"rhd", AllReduceRHD, always},
	}
	for _, k := range []int{2, 3, 4} {
		for _, l1 := range []struct {
			name string
			f    AllReduceFunc
		}{{"ring", AllReduceRing}, {"tree", AllReduceTree}, {"dtree", AllReduceDoubleTree}, {"rhd", AllReduceRHD}} {
			for _, l0 := range []Level0{Level0Ring, Level0RHD} {
				if l0 == Level0RHD && k&(k-1) != 0 {
					continue
				}
				name := fmt.Sprintf("hier%d/level0:%s;level1:%s", k, [...]string{"ring", "rhd"}[l0], l1.name)
				cs = append(cs, allReduceCase{name, func(o *Op, buf []byte, count int) error {
					return AllReduceHier(o, buf, count, blocked(o.Rank(), o.Size(), k), l0, l1.f)
				}, func(n int) bool { return n%k == 0 && (n <= 4*k || n == 32) }})
			}
		}
	}
	return cs
}

var testSizes = []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 32, 64}

func countsFor(n int, big bool) []int {
	c := []int{0, 1, n - 1, 2*n + 3, 1001}
	if big {
		c = append(c, 3*testSegment/4*5+7) // several segments of int32
	}
	return c
}

func TestAllReduceAlgorithms(t *testing.T) {
	for _, c := range allReduceCases() {
		for _, n := range testSizes {
			if !c.ok(n) {
				continue
			}
			big := n <= 8 || n == 17
			for _, count := range countsFor(n, big) {
				ops := []reduce.Op{reduce.Sum}
				if count == 1001 && n <= 9 {
					ops = []reduce.Op{reduce.Sum, reduce.Max, reduce.Min, reduce.Product}
				}
				for _, op := range ops {
					t.Run(fmt.Sprintf("%s/n%d/%d/%s", c.name, n, count, op), func(t *testing.T) {
						in := make([][]int64, n)
						bufs := make([][]byte, n)
						for r := range in {
							in[r] = reftest.Ints(r, count, n)
							if op == reduce.Product {
								for i := range in[r] {
									in[r][i] = in[r][i]%2 + 1 // 0..2, keeps products small
								}
							}
							bufs[r] = reftest.Encode(reduce.Int32, in[r])
						}
						noErrs(t, runRanks(newOps(t, n, reduce.Int32, op, 1), func(o *Op) error {
							return c.run(o, bufs[o.Rank()], count)
						}))
						want := reftest.Encode(reduce.Int32, reftest.Reduce(op, in))
						for r := range bufs {
							require.Equal(t, want, bufs[r], "rank %d", r)
						}
					})
				}
			}
		}
	}
}

// TestAllReduceIdenticalBits checks that float sums, which depend on the
// order of reduction, come out with the same bits on every rank.
func TestAllReduceIdenticalBits(t *testing.T) {
	for _, c := range allReduceCases() {
		for _, n := range []int{3, 6, 12} {
			if !c.ok(n) {
				continue
			}
			count := 3*testSegment/4 + 5
			bufs := make([][]byte, n)
			for r := range bufs {
				rng := rand.New(rand.NewPCG(uint64(r), 3))
				bufs[r] = make([]byte, 4*count)
				for i := 0; i < count; i++ {
					binary.LittleEndian.PutUint32(bufs[r][4*i:], math.Float32bits(rng.Float32()*1e3-500))
				}
			}
			noErrs(t, runRanks(newOps(t, n, reduce.Float32, reduce.Sum, 1), func(o *Op) error {
				return c.run(o, bufs[o.Rank()], count)
			}))
			for r := 1; r < n; r++ {
				require.Equal(t, bufs[0], bufs[r], "%s n=%d rank %d differs from rank 0", c.name, n, r)
			}
		}
	}
}

func TestRootedTrees(t *testing.T) {
	type rooted struct {
		name   string
		bcast  func(o *Op, buf []byte, root int) error
		reduce func(o *Op, buf []byte, root int) error
	}
	for _, c := range []rooted{
		{"tree", BroadcastBinaryTree, ReduceBinaryTree},
		{"dtree", BroadcastDoubleTree, ReduceDoubleTree},
	} {
		for _, n := range testSizes {
			for _, count := range countsFor(n, n <= 5 || n == 17) {
				for _, root := range []int{0, n / 2, n - 1} {
					if n > 9 && root == n/2 {
						continue
					}
					t.Run(fmt.Sprintf("%s/n%d/%d/root%d", c.name, n, count, root), func(t *testing.T) {
						in := make([][]int64, n)
						bufs := make([][]byte, n)
						for r := range in {
							in[r] = reftest.Ints(r, count, 5)
							bufs[r] = reftest.Encode(reduce.Int64, in[r])
						}
						noErrs(t, runRanks(newOps(t, n, reduce.Int64, reduce.Sum, 1), func(o *Op) error {
							return c.bcast(o, bufs[o.Rank()], root)
						}))
						for r := range bufs {
							require.Equal(t, reftest.Encode(reduce.Int64, in[root]), bufs[r], "broadcast rank %d", r)
							bufs[r] = reftest.Encode(reduce.Int64, in[r])
						}
						noErrs(t, runRanks(newOps(t, n, reduce.Int64, reduce.Sum, 2), func(o *Op) error {
							return c.reduce(o, bufs[o.Rank()], root)
						}))
						require.Equal(t, reftest.Encode(reduce.Int64, reftest.Reduce(reduce.Sum, in)), bufs[root], "reduce at root")
						for r := range bufs {
							if r != root {
								require.Equal(t, reftest.Encode(reduce.Int64, in[r]), bufs[r], "reduce modified rank %d", r)
							}
						}
					})
				}
			}
		}
	}
}

func TestAllGatherRD(t *testing.T) {
	for _, n := range []int{1, 2, 4, 8, 16, 32, 64} {
		for _, count := range countsFor(n, n <= 8) {
			ins := make([][]byte, n)
			outs := make([][]byte, n)
			want := []byte{}
			for r := range ins {
				ins[r] = reftest.Encode(reduce.Int32, reftest.Ints(r, count, 7))
				outs[r] = make([]byte, n*len(ins[r]))
				want = append(want, ins[r]...)
			}
			noErrs(t, runRanks(newOps(t, n, reduce.Int32, reduce.Sum, 1), func(o *Op) error {
				return AllGatherRD(o, ins[o.Rank()], outs[o.Rank()], count)
			}))
			for r := range outs {
				require.Equal(t, want, outs[r], "n=%d count=%d rank %d", n, count, r)
			}
		}
	}
	require.False(t, CanAllGatherRD(6))
}

// BenchmarkAllReduceInproc runs each flat all-reduce on 8 goroutine ranks
// over the in-process transport (4 MiB of float32, 64 KiB segments): on few
// cores it measures the schedules' copies, reduces and waits, not a network.
func BenchmarkAllReduceInproc(b *testing.B) {
	const n, size = 8, 4 << 20
	for _, c := range allReduceCases()[:4] {
		b.Run(c.name, func(b *testing.B) {
			ops := newOps(b, n, reduce.Float32, reduce.Sum, 1)
			for _, o := range ops {
				o.Segment = 64 << 10
				o.Scratch = make([]byte, 4*o.Segment)
			}
			bufs := make([][]byte, n)
			for r := range bufs {
				bufs[r] = make([]byte, size)
			}
			b.SetBytes(size)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				for _, o := range ops {
					o.Stamp.Seq = uint64(i + 1)
					o.Deadline = time.Now().Add(time.Minute)
				}
				errs := runRanks(ops, func(o *Op) error { return c.run(o, bufs[o.Rank()], size/4) })
				for _, err := range errs {
					if err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
