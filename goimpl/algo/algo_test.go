package algo

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/internal/reftest"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/topo"
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
	return reftest.OnRanks(len(ops), func(r int) error { return f(ops[r]) })
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
	for i := 0; i < k; i++ {
		for m := 0; m < n/k; m++ {
			h.Order = append(h.Order, m*k+i)
		}
	}
	return h
}

// dealt returns the hierarchy of rank r when the n ranks are dealt out to
// n/k nodes of k ranks round-robin, so rank r is on node r mod (n/k) and no
// node's ranks are consecutive (hosts as a launcher may interleave them).
// It is built with topo, independently of blocked.
func dealt(r, n, k int) Hierarchy {
	hosts := make([]string, n)
	for i := range hosts {
		hosts[i] = fmt.Sprint("host", i%(n/k))
	}
	t := topo.FromHosts(hosts)
	l0, l1, err := t.Levels(r)
	if err != nil {
		panic(err)
	}
	return Hierarchy{Local: l0, Cross: l1, Order: t.SliceOrder()}
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

// vectorCase is an allgather or reduce-scatter schedule: in and out as the
// collective takes them, count elements per rank.
type vectorCase struct {
	name string
	run  func(o *Op, in, out []byte, count int) error
	ok   func(n int) bool
}

// hierCases returns, for node sizes 2, 3 and 4 and both ways of placing
// ranks on nodes (consecutive and dealt round-robin), a case per pair of
// level schedules that can run, built by f from the hierarchy, level0 and
// level1. level1 recursive doubling needs a power-of-two number of nodes
// when pow2Nodes is set.
func hierCases(pow2Nodes bool, f func(h Hierarchy, l0 Level0, l1 Level1, o *Op, in, out []byte, count int) error) []vectorCase {
	var cs []vectorCase
	for _, k := range []int{2, 3, 4} {
		for _, place := range []struct {
			name string
			h    func(r, n, k int) Hierarchy
		}{{"", blocked}, {"dealt", dealt}} {
			for _, l0 := range []Level0{Level0Ring, Level0RHD} {
				for _, l1 := range []Level1{Level1Ring, Level1RHD} {
					if l0 == Level0RHD && k&(k-1) != 0 {
						continue
					}
					name := fmt.Sprintf("hier%d%s/level0:%s;level1:%s", k, place.name, [...]string{"ring", "rhd"}[l0], [...]string{"ring", "rhd"}[l1])
					cs = append(cs, vectorCase{name, func(o *Op, in, out []byte, count int) error {
						return f(place.h(o.Rank(), o.Size(), k), l0, l1, o, in, out, count)
					}, func(n int) bool {
						nodes := n / k
						if n%k != 0 || (l1 == Level1RHD && pow2Nodes && nodes&(nodes-1) != 0) {
							return false
						}
						// Dealt placement is the same as blocked on one node.
						return (n <= 4*k || n == 32) && (place.name == "" || nodes > 1)
					}})
				}
			}
		}
	}
	return cs
}

func allGatherCases() []vectorCase {
	always := func(int) bool { return true }
	return append([]vectorCase{
		{"ring", AllGatherRing, always},
		{"rd", AllGatherRD, CanAllGatherRD},
	}, hierCases(true, func(h Hierarchy, l0 Level0, l1 Level1, o *Op, in, out []byte, count int) error {
		return AllGatherHier(o, in, out, count, h, l0, l1)
	})...)
}

func reduceScatterCases() []vectorCase {
	always := func(int) bool { return true }
	return append([]vectorCase{
		{"ring", ReduceScatterRing, always},
		{"rh", ReduceScatterRH, always},
	}, hierCases(false, func(h Hierarchy, l0 Level0, l1 Level1, o *Op, in, out []byte, count int) error {
		return ReduceScatterHier(o, in, out, count, h, l0, l1)
	})...)
}

// TestAllGatherAlgorithms checks every allgather schedule against the
// concatenation of the inputs, with the input separate from the output and
// aliasing the rank's own block of it.
func TestAllGatherAlgorithms(t *testing.T) {
	for _, c := range allGatherCases() {
		for _, n := range testSizes {
			if !c.ok(n) {
				continue
			}
			for _, count := range countsFor(n, n <= 8 || n == 17) {
				for _, inPlace := range []bool{false, true} {
					if inPlace && count != 1001 {
						continue
					}
					t.Run(fmt.Sprintf("%s/n%d/%d/inplace=%v", c.name, n, count, inPlace), func(t *testing.T) {
						ins := make([][]byte, n)
						outs := make([][]byte, n)
						want := []byte{}
						for r := range ins {
							ins[r] = reftest.Encode(reduce.Int32, reftest.Ints(r, count, 7))
							want = append(want, ins[r]...)
							outs[r] = reftest.Encode(reduce.Int32, reftest.Ints(r+n, n*count, 8)) // garbage to overwrite
							if inPlace {
								copy(outs[r][r*len(ins[r]):], ins[r])
								ins[r] = outs[r][r*len(ins[r]) : (r+1)*len(ins[r])]
							}
						}
						noErrs(t, runRanks(newOps(t, n, reduce.Int32, reduce.Sum, 1), func(o *Op) error {
							return c.run(o, ins[o.Rank()], outs[o.Rank()], count)
						}))
						for r := range outs {
							require.Equal(t, want, outs[r], "rank %d", r)
						}
					})
				}
			}
		}
	}
}

// TestReduceScatterAlgorithms checks every reduce-scatter schedule: rank r's
// output is block r of the reference reduction of all inputs, and no input
// is modified.
func TestReduceScatterAlgorithms(t *testing.T) {
	for _, c := range reduceScatterCases() {
		for _, n := range testSizes {
			if !c.ok(n) {
				continue
			}
			for _, count := range countsFor(n, n <= 8 || n == 17) {
				ops := []reduce.Op{reduce.Sum}
				if count == 1001 && n <= 9 {
					ops = []reduce.Op{reduce.Sum, reduce.Max, reduce.Min, reduce.Product}
				}
				for _, op := range ops {
					t.Run(fmt.Sprintf("%s/n%d/%d/%s", c.name, n, count, op), func(t *testing.T) {
						in := make([][]int64, n)
						ins := make([][]byte, n)
						outs := make([][]byte, n)
						for r := range in {
							in[r] = reftest.Ints(r, n*count, 9)
							if op == reduce.Product {
								for i := range in[r] {
									in[r][i] = in[r][i]%2 + 1
								}
							}
							ins[r] = reftest.Encode(reduce.Int32, in[r])
							outs[r] = reftest.Encode(reduce.Int32, reftest.Ints(r+n, count, 10)) // garbage to overwrite
						}
						noErrs(t, runRanks(newOps(t, n, reduce.Int32, op, 1), func(o *Op) error {
							return c.run(o, ins[o.Rank()], outs[o.Rank()], count)
						}))
						want := reftest.Reduce(op, in)
						for r := range outs {
							require.Equal(t, reftest.Encode(reduce.Int32, want[r*count:(r+1)*count]), outs[r], "rank %d", r)
							require.Equal(t, reftest.Encode(reduce.Int32, in[r]), ins[r], "rank %d's input was modified", r)
						}
					})
				}
			}
		}
	}
}

// TestReduceScatterFloat runs the reduce-scatters on random float32 data,
// whose sums depend on the order of reduction, against a float64 sum: each
// rank's block must be within the rounding of n float32 additions. (Each
// block of a reduce-scatter lives on one rank only, so there are no copies
// whose bits could differ.)
func TestReduceScatterFloat(t *testing.T) {
	for _, c := range reduceScatterCases() {
		for _, n := range []int{3, 6, 12} {
			if !c.ok(n) {
				continue
			}
			count := 3*testSegment/4/n + 5
			ins := make([][]byte, n)
			outs := make([][]byte, n)
			sum := make([]float64, n*count)
			for r := range ins {
				rng := rand.New(rand.NewPCG(uint64(r), 4))
				ins[r] = make([]byte, 4*n*count)
				for i := 0; i < n*count; i++ {
					v := rng.Float32()*1e3 - 500
					binary.LittleEndian.PutUint32(ins[r][4*i:], math.Float32bits(v))
					sum[i] += float64(v)
				}
				outs[r] = make([]byte, 4*count)
			}
			noErrs(t, runRanks(newOps(t, n, reduce.Float32, reduce.Sum, 1), func(o *Op) error {
				return c.run(o, ins[o.Rank()], outs[o.Rank()], count)
			}))
			for r := range outs {
				for i := 0; i < count; i++ {
					got := float64(math.Float32frombits(binary.LittleEndian.Uint32(outs[r][4*i:])))
					require.InDelta(t, sum[r*count+i], got, float64(n)*1e-3, "%s n=%d rank %d element %d", c.name, n, r, i)
				}
			}
		}
	}
}

// TestWorkBufferReuse runs the schedules that keep partial sums in Op.Work
// on one set of ops with a large, a small and again a large count, so a
// stale or too short work buffer would show.
func TestWorkBufferReuse(t *testing.T) {
	const n = 6
	for _, c := range reduceScatterCases() {
		if !c.ok(n) {
			continue
		}
		ops := newOps(t, n, reduce.Int64, reduce.Sum, 1)
		for i, count := range []int{4001, 3, 4001, 1} {
			in := make([][]int64, n)
			ins := make([][]byte, n)
			outs := make([][]byte, n)
			for r := range in {
				in[r] = reftest.Ints(r, n*count, 11+i)
				ins[r] = reftest.Encode(reduce.Int64, in[r])
				outs[r] = make([]byte, 8*count)
			}
			for _, o := range ops {
				o.Stamp.Seq = uint64(i + 1)
			}
			noErrs(t, runRanks(ops, func(o *Op) error { return c.run(o, ins[o.Rank()], outs[o.Rank()], count) }))
			want := reftest.Reduce(reduce.Sum, in)
			for r := range outs {
				require.Equal(t, reftest.Encode(reduce.Int64, want[r*count:(r+1)*count]), outs[r], "%s call %d rank %d", c.name, i, r)
			}
		}
	}
}

func TestHierarchyChecked(t *testing.T) {
	n := 4
	bad := blocked(0, n, 2)
	bad.Order = nil
	ops := newOps(t, n, reduce.Int32, reduce.Sum, 1)
	errs := runRanks(ops[:1], func(o *Op) error {
		return AllGatherHier(o, make([]byte, 4), make([]byte, 4*n), 1, bad, Level0Ring, Level1Ring)
	})
	require.ErrorContains(t, errs[0], "slice order")
	errs = runRanks(ops[:1], func(o *Op) error {
		return ReduceScatterHier(o, make([]byte, 4*n), make([]byte, 4), 1, blocked(0, 6, 3), Level0Ring, Level1Ring)
	})
	require.ErrorContains(t, errs[0], "does not cover 4 ranks")
}

func TestCanAllGatherRD(t *testing.T) {
	for n := 1; n <= 64; n++ {
		require.Equal(t, n&(n-1) == 0, CanAllGatherRD(n), "n=%d", n)
	}
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

// BenchmarkVectorInproc runs each allgather and reduce-scatter on 8
// goroutine ranks (hierarchical ones as 2 nodes of 4) over the in-process
// transport, 4 MiB of float32 output or input, 64 KiB segments; with
// -benchmem it shows that a steady stream allocates nothing, the work
// buffer included.
func BenchmarkVectorInproc(b *testing.B) {
	const n, size = 8, 4 << 20
	for _, coll := range []struct {
		name  string
		cases []vectorCase
	}{{"allgather", allGatherCases()}, {"reducescatter", reduceScatterCases()}} {
		for _, c := range coll.cases {
			if !c.ok(n) || (strings.HasPrefix(c.name, "hier") && !strings.HasPrefix(c.name, "hier4/")) {
				continue
			}
			b.Run(coll.name+"/"+c.name, func(b *testing.B) {
				ops := newOps(b, n, reduce.Float32, reduce.Sum, 1)
				for _, o := range ops {
					o.Segment = 64 << 10
					o.Scratch = make([]byte, 4*o.Segment)
				}
				ins, outs := make([][]byte, n), make([][]byte, n)
				for r := range ins {
					if coll.name == "allgather" {
						ins[r], outs[r] = make([]byte, size/n), make([]byte, size)
					} else {
						ins[r], outs[r] = make([]byte, size), make([]byte, size/n)
					}
				}
				b.SetBytes(size)
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for _, o := range ops {
						o.Stamp.Seq = uint64(i + 1)
						o.Deadline = time.Now().Add(time.Minute)
					}
					errs := runRanks(ops, func(o *Op) error { return c.run(o, ins[o.Rank()], outs[o.Rank()], size/4/n) })
					for _, err := range errs {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
