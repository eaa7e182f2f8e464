package mesh

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/gohccl/gohccl/goimpl/algo/pattern"
	"github.com/gohccl/gohccl/goimpl/internal/reftest"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/shm"
	"github.com/gohccl/gohccl/goimpl/transport"
	"github.com/stretchr/testify/require"
)

// testOptions are the engines' options in the tests (and their children):
// the defaults, waits that yield when ranks outnumber the cores, so that
// the tests of 3-8 goroutine ranks on a 2-core machine do not crawl, and
// the measurement hooks GOHCCL_MESH_TEST_CHUNK and GOHCCL_MESH_TEST_STREAM.
func testOptions(n int) Options {
	o := DefaultOptions()
	if n > 2 {
		o.Wait = shm.Policy{Spin: 2 * time.Microsecond, Yield: true}
	}
	if v, err := strconv.Atoi(os.Getenv("GOHCCL_MESH_TEST_CHUNK")); err == nil {
		o.Chunk = v
	}
	if v, err := strconv.Atoi(os.Getenv("GOHCCL_MESH_TEST_STREAM")); err == nil {
		o.StreamMin = v
	}
	return o
}

// schedules names the set of variants the tests run the operations with
// (withSchedules): "default" is what goimpl/tune picks on a typical host
// (one-shot, two-phase from 16 KiB at three ranks and more, and eager
// broadcasts up to EagerBytes),
// "twophase" and "singlecopy" force those variants wherever the operation
// has them. A child process reads it from GOHCCL_MESH_TEST_SCHEDULES.
var schedules = "default"

// variantFor is the variant of an operation of kind among n ranks moving
// bytes per rank under the current schedules.
func variantFor(kind transport.Kind, n, bytes int) Variant {
	reducing := kind == transport.KindAllReduce || kind == transport.KindReduce
	switch schedules {
	case "twophase":
		if reducing {
			return TwoPhase
		}
	case "singlecopy":
		if kind == transport.KindAllReduce || kind == transport.KindAllGather || kind == transport.KindBroadcast {
			return SingleCopy
		}
	default:
		if reducing && n > 2 && bytes > 16<<10 {
			return TwoPhase
		}
		if kind == transport.KindBroadcast && bytes <= EagerBytes {
			return Eager
		}
	}
	return OneShot
}

// region returns a zeroed, cache-line aligned heap region for n ranks.
func region(n, budget int) []byte {
	size := RegionSize(n, budget, testOptions(n))
	raw := make([]byte, size+lineSize)
	off := int(-uintptr(unsafe.Pointer(&raw[0])) & (lineSize - 1))
	return raw[off : off+size : off+size]
}

// engines attaches n goroutine ranks to one heap region.
func engines(t testing.TB, n, budget int) []*Engine {
	mem := region(n, budget)
	es := make([]*Engine, n)
	for r := range n {
		e, err := Attach(mem, n, r, budget, testOptions(n))
		require.NoError(t, err)
		e.SetSingleCopy(schedules == "singlecopy")
		es[r] = e
	}
	return es
}

// onRanks runs f for every rank on its own goroutine and returns the errors.
func onRanks(n int, f func(r int) error) []error { return reftest.OnRanks(n, f) }

func noErrors(t testing.TB, errs []error) {
	t.Helper()
	for r, err := range errs {
		require.NoError(t, err, "local rank %d", r)
	}
}

// newCall stamps a collective as the communicator would.
func newCall(kind transport.Kind, dt reduce.DType, op reduce.Op, count, root int, seq uint64) *Call {
	c := &Call{Stamp: transport.Header{Fingerprint: transport.Fingerprint{Kind: kind, DType: dt, Op: op,
		Root: int32(root), Count: uint64(count)}, Seq: seq}, DType: dt, Deadline: time.Now().Add(60 * time.Second)}
	if kind == transport.KindAllReduce || kind == transport.KindReduce || kind == transport.KindReduceScatter {
		var err error
		if c.Kernel, c.Kernel3, err = reduce.Lookup(dt, op); err != nil {
			panic(err)
		}
	}
	return c
}

// values is rank r's test data for op: small integers, so that any order of
// float arithmetic is exact, in a range where every dtype holds the result:
// [0, 9] for uint8 (its min and max are unsigned), {-2, -1, 1, 2} for
// float products (powers of two stay exact in float16 and bfloat16).
func values(dt reduce.DType, op reduce.Op, r, count, salt int) []int64 {
	v := reftest.Ints(r, count, salt)
	for i, x := range v {
		switch {
		case dt == reduce.Uint8:
			v[i] = (x + 9) % 10
		case op == reduce.Product && dt.IsFloat():
			v[i] = [...]int64{-2, -1, 1, 2}[(x+9)%4]
		}
	}
	return v
}

// encode lays v out as dt elements; integers wrap as the kernels do.
// gathered is the allgather reference: every rank's input in rank order.
func gathered(dt reduce.DType, op reduce.Op, r, n int, in [][]int64, count int) []byte {
	var all []int64
	for _, v := range in {
		all = append(all, v...)
	}
	return encode(dt, all)
}

func encode(dt reduce.DType, v []int64) []byte {
	switch dt {
	case reduce.Int32, reduce.Int64, reduce.Float32, reduce.Float64:
		return reftest.Encode(dt, v)
	}
	b := make([]byte, len(v)*dt.Size())
	for i, x := range v {
		switch dt {
		case reduce.Uint8:
			b[i] = byte(x)
		case reduce.BFloat16:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(float32(x))>>16))
		case reduce.Float16:
			binary.LittleEndian.PutUint16(b[2*i:], half(x))
		default:
			panic("encode: " + dt.String())
		}
	}
	return b
}

// half is the binary16 encoding of a small integer (|x| <= 2048, exact).
func half(x int64) uint16 {
	if x == 0 {
		return 0
	}
	f := math.Float32bits(float32(x))
	return uint16(f>>16&0x8000 | (f>>23&0xff-127+15)<<10 | f>>13&0x3ff)
}

var allDTypes = []reduce.DType{reduce.Float32, reduce.Float64, reduce.Float16, reduce.BFloat16, reduce.Int32, reduce.Int64, reduce.Uint8}
var allOps = []reduce.Op{reduce.Sum, reduce.Product, reduce.Min, reduce.Max}

// collective is one operation of the tests: run executes it on rank r and
// check compares rank r's result with the reference.
type collective struct {
	name string
	kind transport.Kind
	// run executes the op on rank r over data, the rank's input (count
	// elements, or count per block for allgather and reduce-scatter).
	run func(e *Engine, c *Call, r int, in []byte, count int) ([]byte, error)
	// want is rank r's expected result from every rank's input values.
	want func(dt reduce.DType, op reduce.Op, r, n int, in [][]int64, count int) []byte
	// sizeOf gives the count of elements of one rank's input for a count.
	inCount func(n, count int) int
}

func root(n int) int { return n - 1 }

var collectives = []collective{
	{"allreduce", transport.KindAllReduce,
		func(e *Engine, c *Call, r int, in []byte, count int) ([]byte, error) {
			return in, e.AllReduce(c, in)
		},
		func(dt reduce.DType, op reduce.Op, r, n int, in [][]int64, count int) []byte {
			return encode(dt, reftest.Reduce(op, in))
		},
		func(n, count int) int { return count }},
	{"reduce", transport.KindReduce,
		func(e *Engine, c *Call, r int, in []byte, count int) ([]byte, error) {
			return in, e.Reduce(c, in, root(e.n))
		},
		func(dt reduce.DType, op reduce.Op, r, n int, in [][]int64, count int) []byte {
			if r == root(n) {
				return encode(dt, reftest.Reduce(op, in))
			}
			return encode(dt, in[r])
		},
		func(n, count int) int { return count }},
	{"reduce_scatter", transport.KindReduceScatter,
		func(e *Engine, c *Call, r int, in []byte, count int) ([]byte, error) {
			out := make([]byte, len(in)/e.n)
			return out, e.ReduceScatter(c, in, out)
		},
		func(dt reduce.DType, op reduce.Op, r, n int, in [][]int64, count int) []byte {
			return encode(dt, reftest.Reduce(op, in)[r*count:(r+1)*count])
		},
		func(n, count int) int { return n * count }},
	{"reduce_scatter_inplace", transport.KindReduceScatter,
		func(e *Engine, c *Call, r int, in []byte, count int) ([]byte, error) {
			out := in[r*len(in)/e.n : (r+1)*len(in)/e.n]
			return out, e.ReduceScatter(c, in, out)
		},
		func(dt reduce.DType, op reduce.Op, r, n int, in [][]int64, count int) []byte {
			return encode(dt, reftest.Reduce(op, in)[r*count:(r+1)*count])
		},
		func(n, count int) int { return n * count }},
	{"reduce_scatter_blocks", transport.KindAllReduce,
		func(e *Engine, c *Call, r int, in []byte, count int) ([]byte, error) {
			err := e.ReduceScatterBlocks(c, in, count)
			off, l := pattern.Blocks(count, e.n, r)
			es := c.DType.Size()
			return in[off*es : (off+l)*es], err
		},
		func(dt reduce.DType, op reduce.Op, r, n int, in [][]int64, count int) []byte {
			off, l := pattern.Blocks(count, n, r)
			return encode(dt, reftest.Reduce(op, in)[off:off+l])
		},
		func(n, count int) int { return count }},
	{"allgather", transport.KindAllGather,
		func(e *Engine, c *Call, r int, in []byte, count int) ([]byte, error) {
			out := make([]byte, e.n*len(in))
			return out, e.AllGather(c, in, out)
		},
		gathered,
		func(n, count int) int { return count }},
	{"allgather_inplace", transport.KindAllGather,
		func(e *Engine, c *Call, r int, in []byte, count int) ([]byte, error) {
			out := make([]byte, e.n*len(in))
			copy(out[r*len(in):], in)
			return out, e.AllGather(c, out[r*len(in):(r+1)*len(in)], out)
		},
		gathered,
		func(n, count int) int { return count }},
	{"allgather_blocks", transport.KindAllReduce,
		func(e *Engine, c *Call, r int, in []byte, count int) ([]byte, error) {
			return in, e.AllGatherBlocks(c, in, count)
		},
		func(dt reduce.DType, op reduce.Op, r, n int, in [][]int64, count int) []byte {
			all := make([]int64, count)
			for q := range n {
				off, l := pattern.Blocks(count, n, q)
				copy(all[off:off+l], in[q][off:off+l])
			}
			return encode(dt, all)
		},
		func(n, count int) int { return count }},
	{"broadcast", transport.KindBroadcast,
		func(e *Engine, c *Call, r int, in []byte, count int) ([]byte, error) {
			return in, e.Broadcast(c, in, root(e.n))
		},
		func(dt reduce.DType, op reduce.Op, r, n int, in [][]int64, count int) []byte {
			return encode(dt, in[root(n)])
		},
		func(n, count int) int { return count }},
}

// runCollective runs one collective on every engine with each rank's
// input and checks every rank's result against the reference; it returns
// the next sequence number.
func runCollective(t testing.TB, es []*Engine, col collective, dt reduce.DType, op reduce.Op, count int, seq uint64, salt int) uint64 {
	t.Helper()
	n := len(es)
	inCount := col.inCount(n, count)
	vals := make([][]int64, n)
	for r := range n {
		vals[r] = values(dt, op, r, inCount, salt)
	}
	rootArg := 0
	if col.kind == transport.KindBroadcast || col.kind == transport.KindReduce {
		rootArg = root(n)
	}
	outs := make([][]byte, n)
	errs := onRanks(n, func(r int) error {
		c := newCall(col.kind, dt, op, count, rootArg, seq)
		c.Variant = variantFor(col.kind, n, count*dt.Size())
		out, err := col.run(es[r], c, r, encode(dt, vals[r]), count)
		outs[r] = out
		return err
	})
	noErrors(t, errs)
	for r := range n {
		want := col.want(dt, op, r, n, vals, count)
		if string(want) != string(outs[r]) {
			require.Equal(t, want, outs[r], "%s %s %s count %d: local rank %d of %d", col.name, dt, op, count, r, n)
		}
	}
	return seq + 1
}

// interesting counts around the engine's boundaries for n ranks of es-byte
// elements: 0, 1, n-1, odd, both sides of the one-shot limit and of one
// piece, and several times the whole data area, so that streaming wraps
// the buffers many times.
func interesting(n, es, budget int) []int {
	l := newLayout(n, budget, testOptions(n).Chunk)
	one := (16 << 10) / es
	area := n * depth * l.buf / es
	cs := []int{0, 1, n - 1, 17, 1001, one - 1, one, one + 1, l.piece/es*n + 1, l.buf/es + 3, 3*area + 5}
	return cs
}

// withSchedules runs f with the default schedules (variantFor), and for two
// ranks, where those are one-shot at every size, again with the two-phase
// all-reduce and reduce and again with the single-copy all-reduce,
// allgather and broadcast at every size (where this process may use
// process_vm_readv).
func withSchedules(t *testing.T, n int, f func(t *testing.T)) {
	t.Run("default", f)
	if n != 2 {
		return
	}
	defer func() { schedules = "default" }()
	schedules = "twophase"
	t.Run("two-phase", f)
	schedules = "singlecopy"
	if cmaWorks() {
		t.Run("single-copy", f)
	}
}

func TestCollectives(t *testing.T) {
	for n := 1; n <= 8; n++ {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			withSchedules(t, n, func(t *testing.T) {
				es := engines(t, n, MinBudget)
				seq := uint64(1)
				for _, col := range collectives {
					for _, count := range interesting(n, 4, MinBudget) {
						dt := reduce.Float32
						if col.kind == transport.KindReduceScatter {
							dt = reduce.Int32
						}
						seq = runCollective(t, es, col, dt, reduce.Sum, count, seq, int(seq))
					}
				}
				errs := onRanks(n, func(r int) error { return es[r].Barrier(newCall(transport.KindBarrier, 0, 0, 0, 0, seq)) })
				noErrors(t, errs)
			})
		})
	}
}

func TestDTypesAndOps(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			withSchedules(t, n, func(t *testing.T) {
				es := engines(t, n, MinBudget)
				seq := uint64(1)
				for _, dt := range allDTypes {
					counts := []int{1, 1001, (16<<10)/dt.Size() + 3, 3*newLayout(n, MinBudget, testOptions(n).Chunk).buf/dt.Size() + 1}
					for _, op := range allOps {
						for _, col := range collectives {
							if col.kind != transport.KindAllReduce && col.kind != transport.KindReduce && col.kind != transport.KindReduceScatter ||
								col.name == "allgather_blocks" {
								continue
							}
							for _, count := range counts {
								seq = runCollective(t, es, col, dt, op, count, seq, int(seq))
							}
						}
					}
				}
			})
		})
	}
}

// TestLargeBudget streams messages several times the region's data area
// through the default 8 MiB budget, whose pieces are at their cap.
func TestLargeBudget(t *testing.T) {
	const budget = 8 << 20
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			withSchedules(t, n, func(t *testing.T) {
				es := engines(t, n, budget)
				l := newLayout(n, budget, testOptions(n).Chunk)
				count := 3*n*depth*l.buf/4 + 11
				seq := uint64(1)
				for _, col := range collectives {
					c := count
					if col.kind == transport.KindReduceScatter || col.kind == transport.KindAllGather {
						c = count / n
					}
					seq = runCollective(t, es, col, reduce.Float32, reduce.Sum, c, seq, 3)
				}
			})
		})
	}
}

// TestRandomSequence runs long random mixes of operations and sizes, the
// same on every rank, so that consecutive operations overlap in the
// pipeline in every combination and the counters run far.
func TestRandomSequence(t *testing.T) {
	for _, n := range []int{2, 3, 4} {
		t.Run(fmt.Sprintf("n=%d", n), func(t *testing.T) {
			withSchedules(t, n, func(t *testing.T) {
				es := engines(t, n, MinBudget)
				rng := rand.New(rand.NewPCG(uint64(n), 99))
				l := newLayout(n, MinBudget, testOptions(n).Chunk)
				sizes := []int{0, 1, 3, 64, 1000, (16<<10)/4 + 1, l.buf/4*2 + 7, 4 * l.buf}
				seq := uint64(1)
				for range 300 {
					col := collectives[rng.IntN(len(collectives))]
					dt := allDTypes[rng.IntN(len(allDTypes))]
					op := allOps[rng.IntN(len(allOps))]
					seq = runCollective(t, es, col, dt, op, sizes[rng.IntN(len(sizes))], seq, rng.IntN(1000))
					if rng.IntN(10) == 0 {
						noErrors(t, onRanks(n, func(r int) error { return es[r].Barrier(newCall(transport.KindBarrier, 0, 0, 0, 0, seq)) }))
						seq++
					}
				}
				for r := range n {
					require.Equal(t, es[0].k, es[r].k, "every rank consumed the same chunks")
				}
				t.Logf("%d chunks", es[0].k)
			})
		})
	}
}

// TestIdenticalBits checks that non-exact float sums still agree bit for
// bit on every rank: the one-shot and two-phase reductions take the same
// rank order on every rank.
func TestIdenticalBits(t *testing.T) {
	for _, n := range []int{2, 3, 5} {
		es := engines(t, n, MinBudget)
		for _, count := range []int{100, (16<<10)/4 + 100, 20000} {
			bufs := make([][]byte, n)
			for r := range n {
				rng := rand.New(rand.NewPCG(uint64(r), 5))
				bufs[r] = make([]byte, 4*count)
				for i := range count {
					binary.LittleEndian.PutUint32(bufs[r][4*i:], math.Float32bits(float32(rng.NormFloat64())*1e3))
				}
			}
			noErrors(t, onRanks(n, func(r int) error {
				c := newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, count, 0, uint64(count))
				c.Variant = variantFor(transport.KindAllReduce, n, 4*count)
				return es[r].AllReduce(c, bufs[r])
			}))
			for r := 1; r < n; r++ {
				require.Equal(t, bufs[0], bufs[r], "n=%d count %d: local rank %d differs from rank 0", n, count, r)
			}
		}
	}
}

// TestNoAllocs checks the steady state of every operation allocates
// nothing, on two goroutine ranks.
func TestNoAllocs(t *testing.T) {
	es := engines(t, 2, MinBudget)
	l := newLayout(2, MinBudget, testOptions(2).Chunk)
	require.LessOrEqual(t, 4*l.buf, EagerBytes, "the eager broadcast runs at both sizes")
	for _, size := range []int{4096, 4 * l.buf} {
		count := size / 4
		bufs := [2][]byte{make([]byte, size), make([]byte, size)}
		outs := [2][]byte{make([]byte, 2*size), make([]byte, 2*size)}
		calls := [2]*Call{newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, count, 0, 0), newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, count, 0, 0)}
		eager := [2]*Call{newCall(transport.KindBroadcast, reduce.Float32, 0, count, 0, 0), newCall(transport.KindBroadcast, reduce.Float32, 0, count, 0, 0)}
		for _, c := range eager {
			c.Variant = Eager
		}
		ops := []func(r int) error{
			func(r int) error { return es[r].AllReduce(calls[r], bufs[r]) },
			func(r int) error { return es[r].Reduce(calls[r], bufs[r], 1) },
			func(r int) error { return es[r].ReduceScatter(calls[r], bufs[r], bufs[r][r*size/2:][:size/2]) },
			func(r int) error { return es[r].ReduceScatterBlocks(calls[r], bufs[r], count) },
			func(r int) error { return es[r].AllGather(calls[r], bufs[r], outs[r]) },
			func(r int) error { return es[r].AllGatherBlocks(calls[r], bufs[r], count) },
			func(r int) error { return es[r].Broadcast(calls[r], bufs[r], 0) },
			func(r int) error { return es[r].Broadcast(eager[r], bufs[r], 0) },
			func(r int) error { return es[r].Barrier(calls[r]) },
		}
		for i, op := range ops {
			const runs = 50
			done := make(chan error, 1)
			go func() {
				for range runs + 1 {
					if err := op(1); err != nil {
						done <- err
						return
					}
				}
				done <- nil
			}()
			allocs := testing.AllocsPerRun(runs, func() {
				if err := op(0); err != nil {
					panic(err)
				}
			})
			require.NoError(t, <-done)
			require.Zero(t, allocs, "op %d at %d bytes allocates", i, size)
		}
	}
}

// cmaWorks says whether this process may use process_vm_readv at all (a
// seccomp policy may forbid it); reading its own memory needs no more.
func cmaWorks() bool {
	src, dst := []byte("probe"), make([]byte, 5)
	return processVMRead(os.Getpid(), dst, uintptr(unsafe.Pointer(&src[0]))) == nil && string(dst) == "probe"
}

// TestSingleCopy runs the single-copy all-reduce, allgather and broadcast
// at sizes where goimpl/tune picks them (megabytes), with uneven and odd
// sizes, and checks that engines not told cross-memory attach works refuse
// the variant on every rank with a sentence instead of running it.
func TestSingleCopy(t *testing.T) {
	if !cmaWorks() {
		t.Skip("process_vm_readv is not permitted here")
	}
	defer func() { schedules = "default" }()
	schedules = "singlecopy"
	allreduce := collectives[0]
	require.Equal(t, "allreduce", allreduce.name)
	counts := []int{1 << 20, 1<<20 + 3, 5<<17 + 1}
	t.Run("works", func(t *testing.T) {
		es := engines(t, 2, 8<<20)
		seq := uint64(1)
		for _, count := range counts {
			seq = runCollective(t, es, allreduce, reduce.Float32, reduce.Sum, count, seq, int(seq))
			seq = runCollective(t, es, allreduce, reduce.Int32, reduce.Max, count, seq, int(seq))
			seq = runCollective(t, es, allreduce, reduce.BFloat16, reduce.Product, count, seq, int(seq))
		}
		for _, gather := range collectives[5:7] {
			require.Contains(t, gather.name, "allgather")
			for _, count := range []int{16 << 10, 16<<10 + 7, 4 << 20} {
				seq = runCollective(t, es, gather, reduce.Float32, reduce.Sum, count, seq, int(seq))
			}
		}
		broadcast := collectives[len(collectives)-1]
		require.Equal(t, "broadcast", broadcast.name)
		for _, count := range []int{64 << 10, 64<<10 + 5, 4 << 20} {
			seq = runCollective(t, es, broadcast, reduce.Float32, reduce.Sum, count, seq, int(seq))
		}
	})
	t.Run("not settled", func(t *testing.T) {
		es := engines(t, 2, 8<<20)
		for _, e := range es {
			e.SetSingleCopy(false)
		}
		errs := onRanks(2, func(r int) error {
			c := newCall(transport.KindAllReduce, reduce.Float32, reduce.Sum, 1<<20, 0, 1)
			c.Variant = SingleCopy
			return es[r].AllReduce(c, make([]byte, 4<<20))
		})
		for r, err := range errs {
			require.ErrorContains(t, err, "cross-memory attach was not found to work", "local rank %d", r)
		}
	})
	t.Run("probe", func(t *testing.T) {
		pid, addr, want := Probe()
		require.True(t, CanReadPeer(pid, addr, want), "this process reads its own probe")
		want[0] ^= 1
		require.False(t, CanReadPeer(pid, addr, want), "a probe that reads back different bytes fails")
	})
}
