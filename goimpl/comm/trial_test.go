package comm

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/internal/reftest"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/rendezvous"
	"github.com/gohccl/gohccl/goimpl/tune"
)

// TestMeasuredChoice runs all-reduces and broadcasts, interleaved, on 3
// ranks with shared memory and GOHCCL_TUNE=measure: each class's first ops
// run the tuner's candidates in turn (on one host the model's choice and
// the engine's rows: the all-reduce's several, the broadcast's one-shot
// alone, so it has no trial where the model chose it), every result is
// checked against the reference, and once the trials end every rank has
// settled each class on the same row, which it keeps; the all-reduce's is
// measured again (tune.Revisit) and settled alike.
func TestMeasuredChoice(t *testing.T) {
	const n = 3
	conf := smallBuffers()
	conf.Tune = "measure"
	conf.Debug = config.Info
	store := rendezvous.NewMemStore()
	comms := make([]*Comm, n)
	noErrors(t, reftest.OnRanks(n, func(r int) (err error) {
		comms[r], err = New(store, Options{Rank: r, Size: n, Timeout: 20 * time.Second, Config: conf, MasterAddr: "127.0.0.1"})
		return err
	}))
	defer func() {
		for _, c := range comms {
			c.Close()
		}
	}()
	require.True(t, comms[0].tuner.Measuring())
	// One revisit, one trial's worth of ops after the trial: every rank
	// must start it at the same op (the results below would be wrong, or
	// the ops time out, otherwise) and say so once.
	again := make([]int, n)
	for r, c := range comms {
		c.tuner.Revisit = tune.Revisit{Times: 1, MinTrials: 1}
		logf := c.tuner.Logf
		c.tuner.Logf = func(format string, args ...any) {
			if line := fmt.Sprintf(format, args...); strings.HasPrefix(line, "allreduce ") && strings.Contains(line, "measuring again") {
				again[r]++
			}
			logf(format, args...)
		}
	}

	const count = 3001 // 24 KiB of int64: streams through several segments
	bytes := count * 8
	seen := map[tune.Coll]map[string]bool{tune.AllReduce: {}, tune.Broadcast: {}}
	// The model's own choice is priced from the host's figures, which a
	// busy host (the other packages' tests beside this one) can make a
	// link's row (goimpl/tune's TestLoadedHostKeepsEngine prices that
	// case); what the trial adds to it are the engine's rows alone.
	modeled := map[tune.Coll]string{}
	for coll := range seen {
		modeled[coll] = comms[0].tuner.Modeled(coll, bytes).Name()
	}
	// Three trials of up to four candidates: the trial, the ops up to the
	// revisit, the revisit.
	for op := range 3 * 4 * tune.Passes * tune.SmallRounds {
		for _, coll := range []tune.Coll{tune.AllReduce, tune.Broadcast} {
			seen[coll][comms[0].tuner.Choose(coll, bytes).Name()] = true
			in := make([][]int64, n)
			bufs := make([][]byte, n)
			for r := range n {
				in[r] = reftest.Ints(r, count, op)
				bufs[r] = reftest.Encode(reduce.Int64, in[r])
			}
			root := op % n
			noErrors(t, runAll(comms, func(c *Comm) error {
				if coll == tune.AllReduce {
					return c.AllReduce(bufs[c.Rank()], count, reduce.Int64, reduce.Sum, 0)
				}
				return c.Broadcast(bufs[c.Rank()], count, reduce.Int64, root, 0)
			}))
			want := in[root]
			if coll == tune.AllReduce {
				want = reftest.Reduce(reduce.Sum, in)
			}
			for r := range n {
				require.Equal(t, reftest.Encode(reduce.Int64, want), bufs[r], "%s op %d rank %d", coll, op, r)
			}
		}
	}
	for _, coll := range []tune.Coll{tune.AllReduce, tune.Broadcast} {
		for name := range seen[coll] {
			require.True(t, name == modeled[coll] || strings.HasPrefix(name, "mesh."), "%s: on one host the trial adds only the engine's rows to the model's %s: %v", coll, modeled[coll], seen[coll])
		}
		if coll == tune.AllReduce {
			require.Greater(t, len(seen[coll]), 1, "%s: the trial ran several rows", coll)
		}
		kept := comms[0].tuner.Choose(coll, bytes)
		for r := range n {
			require.False(t, comms[r].tuner.Trying(coll, bytes), "%s: rank %d's trial ended", coll, r)
			require.Equal(t, kept, comms[r].tuner.Choose(coll, bytes), "%s: rank %d keeps what rank 0 keeps", coll, r)
		}
		require.True(t, seen[coll][kept.Name()], "%s: the row kept was one of those measured", coll)
	}
	require.Equal(t, []int{1, 1, 1}, again, "every rank measured the all-reduce again, once")
}
