package transport

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/reduce"
)

// TestMatcherRepostBeforeWakeUp replays the interleaving behind a rare wrong
// all-reduce result: a link completes a receive, which marks it done and then
// sends its wake-up, and the thread doing so is descheduled in between. The
// waiting rank sees the done state while it spins, returns, and reposts the
// same descriptor for its next frame before the wake-up is sent. That late
// wake-up must not end the next Wait: the next frame has not arrived.
func TestMatcherRepostBeforeWakeUp(t *testing.T) {
	m := NewMatcher(0, 2)
	h := Header{Fingerprint: Fingerprint{Kind: KindAllReduce, DType: reduce.Int32, Count: 1}, Seq: 1,
		Tag: StepTag(2, 0, 0), Len: 4}
	r := &Recv{Peer: 1, Want: h, Buf: make([]byte, 4)}
	m.Post(r)
	dst, claimed, discard := m.Arrive(1, &h)
	require.Same(t, r, claimed)
	require.False(t, discard)
	copy(dst, []byte{1, 2, 3, 4})

	// The link's Complete, held between its two halves: the state is done,
	// the wake-up not sent yet, the matcher's lock held.
	m.mu.Lock()
	r.state.Store(recvDone)
	require.NoError(t, m.Wait(r, time.Now().Add(time.Second)), "the spin sees the done state")
	reposted := make(chan struct{})
	go func() {
		r.Want.Tag = StepTag(2, 1, 0)
		m.Post(r)
		close(reposted)
	}()
	time.Sleep(20 * time.Millisecond) // let Post reach the lock
	m.complete(r, nil)                // the wake-up, late
	m.mu.Unlock()
	<-reposted

	err := m.Wait(r, time.Now().Add(50*time.Millisecond))
	require.ErrorIs(t, err, ErrTimeout, "Wait returned before the frame of the repost arrived")
	require.True(t, r.Done())
}

// TestFifoNeverEmptyStaysSmall keeps a queue one to three items long for
// many pushes and pops without it ever emptying, as a stash does while a
// peer stays a few frames ahead: its backing array must stay about as long
// as the queue, not as long as everything that ever passed through it.
func TestFifoNeverEmptyStaysSmall(t *testing.T) {
	var q fifo[int]
	q.push(0)
	q.push(1)
	next, want := 2, 0
	for i := range 100_000 {
		q.push(next)
		next++
		if i%2 == 0 {
			q.push(next)
			next++
		}
		for q.len() > 1 {
			require.Equal(t, want, q.remove(0), "order kept across the moves")
			want++
		}
	}
	require.LessOrEqual(t, cap(q.items), 16, "the backing array kept the popped front")
	require.Equal(t, next-1, q.at(0))
}

// TestMatcherBeginBehindARootThatRunsAhead is a rank behind a peer that
// sends every op's frame long before this rank begins the op (a broadcast's
// root on shared memory): each Begin compares what arrived for its own op
// and leaves the later ops' frames for their turn, each receive gets its
// own op's frame, and a frame of the wrong collective for op 600, stashed
// behind hundreds of others, fails op 600's Begin and no earlier one.
func TestMatcherBeginBehindARootThatRunsAhead(t *testing.T) {
	const ops, bad = 1000, 600
	m := NewMatcher(1, 2)
	fp := Fingerprint{Kind: KindBroadcast, DType: reduce.Uint8, Root: 0, Count: 1}
	for s := uint64(1); s <= ops; s++ {
		h := Header{Fingerprint: fp, Seq: s, Tag: StepTag(1, 0, 0), Len: 1}
		if s == bad {
			h.Kind = KindAllReduce
		}
		m.Deliver(0, &h, []byte{byte(s)})
	}
	for s := uint64(1); s < bad; s++ {
		stamp := Header{Fingerprint: fp, Seq: s}
		require.NoError(t, m.Begin(&stamp), "op %d", s)
		r := Recv{Peer: 0, Want: Header{Fingerprint: fp, Seq: s, Tag: StepTag(1, 0, 0), Len: 1}, Buf: make([]byte, 1)}
		m.Post(&r)
		require.True(t, r.Done())
		require.NoError(t, r.Err())
		require.Equal(t, byte(s), r.Buf[0], "op %d", s)
	}
	require.Equal(t, ops-bad+1, m.peers[0].collStash.len())
	stamp := Header{Fingerprint: fp, Seq: bad}
	err := m.Begin(&stamp)
	require.ErrorIs(t, err, ErrMismatch)
	require.Contains(t, err.Error(), "collective #600")
}

// BenchmarkMatcherBeginBehind is one op's Begin while the stash holds the
// frames of the next ahead ops from one peer: it should not grow with ahead.
func BenchmarkMatcherBeginBehind(b *testing.B) {
	for _, ahead := range []int{0, 64, 4096} {
		b.Run(fmt.Sprintf("ahead=%d", ahead), func(b *testing.B) {
			m := NewMatcher(1, 2)
			fp := Fingerprint{Kind: KindBroadcast, DType: reduce.Uint8, Root: 0, Count: 1}
			for s := uint64(2); s < uint64(2+ahead); s++ {
				h := Header{Fingerprint: fp, Seq: s, Len: 1}
				m.Deliver(0, &h, []byte{1})
			}
			stamp := Header{Fingerprint: fp, Seq: 1}
			b.ReportAllocs()
			for b.Loop() {
				if err := m.Begin(&stamp); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
