package comm

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/internal/reftest"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/rendezvous"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// The tests here are issue 21's adversarial shapes: what a careless or
// hostile caller does that every rank must name at once, never wait out or
// return silently wrong.

// meshGroup is group over the real bootstrap with the default table, so that
// every collective the shared-memory engine has runs on it and the others
// (gather, scatter, all-to-all) over the shared-memory links.
func meshGroup(t *testing.T, n int) []*Comm {
	t.Helper()
	comms := make([]*Comm, n)
	cfg := smallBuffers()
	store := rendezvous.NewMemStore()
	noErrors(t, reftest.OnRanks(n, func(r int) error {
		var err error
		comms[r], err = New(store, Options{Rank: r, Size: n, Timeout: reliabilityTimeout, Config: cfg, MasterAddr: "127.0.0.1"})
		return err
	}))
	t.Cleanup(func() {
		for _, c := range comms {
			c.Close()
		}
	})
	return comms
}

func adversarialGroup(t *testing.T, tr string, n int) []*Comm {
	if tr == "mesh" {
		return meshGroup(t, n)
	}
	return group(t, tr, n)
}

// isMismatch says whether err is a mismatch seen here, by the peer that
// aborted, or by the earlier op that broke the communicator.
func isMismatch(err error) bool {
	return errors.Is(err, transport.ErrMismatch) || errors.Is(err, ErrBroken) && strings.Contains(err.Error(), "collective mismatch")
}

// namesRoots says whether a mismatch of rooted ops names both roots, or
// (a rank whose peer had already moved on to its next op) this rank's op
// and the peer's next one.
var namesRoots = regexp.MustCompile(`root 0.* root 1\)|root 1.* root 0\)|expected collective #1 \([a-z_]+ float32 count \d+( op sum)? root [01]\) but rank \d sent collective #2`)

// rooted runs one rooted collective of count float32 elements with root.
func rooted(c *Comm, kind string, count, root int) error {
	es := 4
	in, out := make([]byte, es*count), make([]byte, es*count*c.Size())
	switch kind {
	case "broadcast":
		return c.Broadcast(in, count, reduce.Float32, root, 0)
	case "reduce":
		return c.Reduce(in, count, reduce.Float32, reduce.Sum, root, 0)
	case "gather":
		return c.Gather(in, out, count, reduce.Float32, root, 0)
	case "scatter":
		return c.Scatter(out, in, count, reduce.Float32, root, 0)
	}
	panic(kind)
}

// TestMismatchedRootsNamed: rank 1 names root 1 where the others name root 0
// (issue 21's scatter with roots 0, 1, 0). Every rank fails, within a
// fraction of the timeout, with a mismatch naming both roots: in the rooted
// op itself, or (a root that only sends and so cannot know) at its next op,
// told by a rank that does. No rank runs a later op on wrong data.
func TestMismatchedRootsNamed(t *testing.T) {
	for _, tr := range []string{"inproc", "tcp", "shm", "mesh"} {
		for _, n := range []int{2, 3, 4} {
			for _, kind := range []string{"scatter", "gather", "reduce", "broadcast"} {
				for _, count := range []int{1, 3000} {
					t.Run(fmt.Sprintf("%s/n%d/%s/%d", tr, n, kind, count), func(t *testing.T) {
						comms := adversarialGroup(t, tr, n)
						errs, took := timed(comms, func(c *Comm) error {
							root := 0
							if c.Rank() == 1 {
								root = 1
							}
							if err := rooted(c, kind, count, root); err != nil {
								return err
							}
							// A root that only sends (scatter, broadcast) cannot
							// know; it learns from a rank that does, before its
							// next op that waits for that rank returns.
							if err := c.AllReduce(make([]byte, 4*count), count, reduce.Float32, reduce.Sum, 0); err != nil {
								return err
							}
							return c.Barrier(0)
						})
						named := 0
						for r, err := range errs {
							require.Error(t, err, "rank %d", r)
							assert.Less(t, took[r], fastFailure, "rank %d: %v", r, err)
							if !isMismatch(err) && errors.Is(err, transport.ErrPeerLost) {
								// Known gap (docs/reliability.md): now and then
								// (a few runs in 30 of this test, more under
								// load) a rank's op meets the closed
								// connection of a rank that already failed
								// before it reads that rank's abort frame: it
								// fails at once naming the lost rank, not the
								// mismatch. Never success with wrong data.
								continue
							}
							assert.True(t, isMismatch(err), "rank %d: not a mismatch: %v", r, err)
							assert.Regexp(t, namesRoots, err.Error(), "rank %d", r)
							named++
						}
						assert.Positive(t, named, "no rank named the mismatch")
					})
				}
			}
		}
	}
}

// TestMeshOpAgainstLinkOp: on one host an op the engine runs (all-reduce)
// meets one the links run (all-to-all, gather, scatter) as the same
// collective: both sides name both ops at once, not after the timeout. The
// same when a rank's call was refused and its next op meets the others'
// refused kind.
func TestMeshOpAgainstLinkOp(t *testing.T) {
	const count = 64
	linkOps := map[string]func(c *Comm) error{
		"alltoall": func(c *Comm) error {
			n := c.Size()
			counts, offs := make([]int, n), make([]int, n)
			for p := range counts {
				counts[p], offs[p] = count, p*count
			}
			b := make([]byte, 4*count*n)
			return c.AllToAllV(b, counts, offs, make([]byte, len(b)), counts, offs, reduce.Float32, 0)
		},
		"gather":  func(c *Comm) error { return rooted(c, "gather", count, 0) },
		"scatter": func(c *Comm) error { return rooted(c, "scatter", count, 0) },
	}
	for _, n := range []int{2, 3} {
		for name, linkOp := range linkOps {
			for odd := range n {
				t.Run(fmt.Sprintf("n%d/%s/rank%d", n, name, odd), func(t *testing.T) {
					comms := meshGroup(t, n)
					errs, took := timed(comms, func(c *Comm) error {
						var err error
						if c.Rank() == odd {
							err = c.AllReduce(make([]byte, 4*count), count, reduce.Float32, reduce.Sum, 0)
						} else {
							err = linkOp(c)
						}
						if err != nil {
							return err
						}
						// A rank that only sent (gather, scatter) cannot know;
						// it learns before its next op returns.
						return c.Barrier(0)
					})
					mismatchNamedBySome(t, errs, took, "allreduce float32 count 64", name+" float32")
				})
			}
		}
	}
	t.Run("refused", func(t *testing.T) {
		comms := meshGroup(t, 3)
		errs, took := timed(comms, func(c *Comm) error {
			if c.Rank() == 2 {
				err := c.Scatter(nil, make([]byte, 4*count), count, reduce.Float32, 7, 0)
				if !errors.Is(err, ErrInvalid) {
					return fmt.Errorf("the bad root was not refused: %v", err)
				}
				return c.AllReduce(make([]byte, 4*count), count, reduce.Float32, reduce.Sum, 0)
			}
			if err := rooted(c, "scatter", count, 0); err != nil {
				return err
			}
			return c.Barrier(0)
		})
		mismatchNamedBySome(t, errs, took, "scatter float32", "allreduce float32")
	})
}

// mismatchNamedBySome checks that every rank failed at once with a mismatch
// and that some rank named both ops. Which pair of ops a rank names depends
// on what it had reached when a peer's abort arrived (its barrier, say), so
// only some rank is sure to name the two that differ (known gap,
// docs/reliability.md).
func mismatchNamedBySome(t *testing.T, errs []error, took []time.Duration, op1, op2 string) {
	t.Helper()
	both := 0
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		assert.Less(t, took[r], fastFailure, "rank %d: %v", r, err)
		assert.True(t, isMismatch(err), "rank %d: not a mismatch: %v", r, err)
		if strings.Contains(err.Error(), op1) && strings.Contains(err.Error(), op2) {
			both++
		}
	}
	assert.Positive(t, both, "no rank named both %q and %q: %v", op1, op2, errs)
}

// muteStore is a rank's view of the store that drops its writes of keys
// containing mute: a rank that dies before publishing them.
type muteStore struct {
	rendezvous.Store
	mute string
}

func (s muteStore) Set(key string, value []byte) error {
	if strings.Contains(key, s.mute) {
		return nil
	}
	return s.Store.Set(key, value)
}

// TestBootstrapMissingShmReport: rank 0 never publishes its shared-memory
// report (it died there). The others must fail their bootstrap naming it,
// not read the silence as "same host, no shared memory" and succeed over
// TCP after the timeout.
func TestBootstrapMissingShmReport(t *testing.T) {
	const n = 3
	store := rendezvous.NewMemStore()
	errs := make([]error, n)
	comms := make([]*Comm, n)
	start := time.Now()
	_ = reftest.OnRanks(n, func(r int) error {
		var s rendezvous.Store = store
		if r == 0 {
			s = muteStore{store, "shm/"}
		}
		comms[r], errs[r] = New(s, Options{Rank: r, Size: n, Timeout: 2 * time.Second, Config: smallBuffers(), MasterAddr: "127.0.0.1"})
		return nil
	})
	for _, c := range comms {
		if c != nil {
			c.Close()
		}
	}
	for r := 1; r < n; r++ {
		require.Error(t, errs[r], "rank %d bootstrapped without rank 0's shared-memory report", r)
		assert.ErrorIs(t, errs[r], ErrBootstrap)
		assert.Contains(t, errs[r].Error(), "rank 0", "rank %d", r)
	}
	assert.Less(t, time.Since(start), 10*time.Second)
}

// TestBootstrapDeadPeerFailsFast: a rank that dies after the ranks
// connected (its links close) fails the others' bootstrap within seconds,
// not at the timeout, naming it.
func TestBootstrapDeadPeerFailsFast(t *testing.T) {
	const n = 3
	store := rendezvous.NewMemStore()
	errs := make([]error, n)
	comms := make([]*Comm, n)
	start := time.Now()
	took := make([]time.Duration, n)
	_ = reftest.OnRanks(n, func(r int) error {
		var s rendezvous.Store = store
		if r == 0 {
			s = dyingStore{store, "shm/"}
		}
		comms[r], errs[r] = New(s, Options{Rank: r, Size: n, Timeout: 60 * time.Second, Config: smallBuffers(), MasterAddr: "127.0.0.1"})
		took[r] = time.Since(start)
		return nil
	})
	for _, c := range comms {
		if c != nil {
			c.Close()
		}
	}
	for r := 1; r < n; r++ {
		require.Error(t, errs[r], "rank %d", r)
		assert.ErrorIs(t, errs[r], ErrBootstrap)
		assert.Contains(t, errs[r].Error(), "rank 0", "rank %d", r)
		assert.Less(t, took[r], 10*time.Second, "rank %d waited for a dead peer: %v", r, errs[r])
	}
}

// dyingStore fails rank 0's bootstrap at its first write of a key
// containing at, as if the process died there: the bootstrap then closes
// its links, which is what the kernel does for a dead process.
type dyingStore struct {
	rendezvous.Store
	at string
}

func (s dyingStore) Set(key string, value []byte) error {
	if strings.Contains(key, s.at) {
		return errors.New("this rank died")
	}
	return s.Store.Set(key, value)
}

// TestSettingsMustAgree: ranks whose GOHCCL_* settings that must agree
// differ fail their bootstrap at once, naming the variable, each value and
// the ranks that hold it.
func TestSettingsMustAgree(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(c *config.Config)
		want []string
	}{
		{"GOHCCL_BUFFSIZE", func(c *config.Config) { c.BuffSize *= 2 }, []string{"GOHCCL_BUFFSIZE", "ranks 0, 2", "rank 1"}},
		{"GOHCCL_TRANSPORT", func(c *config.Config) { c.Transport = "tcp" }, []string{"GOHCCL_TRANSPORT", "tcp on rank 1", "auto on ranks 0, 2"}},
		{"GOHCCL_ALGO", func(c *config.Config) { c.Algo = "ring" }, []string{"GOHCCL_ALGO", "ring on rank 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 3
			store := rendezvous.NewMemStore()
			errs := make([]error, n)
			start := time.Now()
			_ = reftest.OnRanks(n, func(r int) error {
				cfg := smallBuffers()
				cfg.Transport, cfg.Algo = "auto", "auto"
				if r == 1 {
					tc.set(&cfg)
				}
				c, err := New(store, Options{Rank: r, Size: n, Timeout: 30 * time.Second, Config: cfg, MasterAddr: "127.0.0.1"})
				if c != nil {
					c.Close()
				}
				errs[r] = err
				return nil
			})
			for r, err := range errs {
				require.Error(t, err, "rank %d", r)
				assert.ErrorIs(t, err, ErrSettings, "rank %d", r)
				for _, w := range tc.want {
					assert.Contains(t, err.Error(), w, "rank %d", r)
				}
			}
			assert.Less(t, time.Since(start), 10*time.Second)
		})
	}
}
