package transport

import (
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
