package tcp

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// collFrame is the header of segment j of collective #1, as a schedule
// would stamp it.
func collFrame(j, n int) transport.Header {
	return transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindAllGather, DType: reduce.Uint8, Count: 1 << 30},
		Seq: 1, Tag: transport.StepTag(1, 0, j), Len: uint32(n)}
}

// waitStalled polls progress until it stops moving for quiet, and returns
// its value then.
func waitStalled(t *testing.T, progress func() int64, quiet time.Duration) int64 {
	t.Helper()
	last, since := progress(), time.Now()
	deadline := time.Now().Add(20 * time.Second)
	for time.Since(since) < quiet {
		require.True(t, time.Now().Before(deadline), "the sender never stalled")
		time.Sleep(20 * time.Millisecond)
		if p := progress(); p != last {
			last, since = p, time.Now()
		}
	}
	return last
}

// TestEarlyFramesAreBounded: a sender that runs far ahead of the receiver's
// posted receives makes it hold at most the early-frame limit; the rest of
// its frames wait in its sends (TCP flow control), and once the receives
// are posted every byte arrives, in order, intact.
func TestEarlyFramesAreBounded(t *testing.T) {
	const limit = 1 << 20
	const seg = 256 << 10
	const frames = 160 // 40 MiB: far more than the limit plus both sockets' buffers
	c0, c1 := connected(t)
	m0, m1 := transport.NewMatcher(0, 2), transport.NewMatcher(1, 2)
	m0.SetEarlyLimit(limit)
	l0, l1 := NewLink(c0, 1, m0), NewLink(c1, 0, m1)
	defer l0.Close()
	defer l1.Close()

	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, frames*seg)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	var sent atomic.Int64
	sendErr := make(chan error, 1)
	go func() {
		for j := 0; j < frames; j++ {
			h := collFrame(j, seg)
			if err := l1.Send(&h, data[j*seg:(j+1)*seg], time.Now().Add(30*time.Second)); err != nil {
				sendErr <- err
				return
			}
			sent.Add(1)
		}
		sendErr <- nil
	}()

	stalled := waitStalled(t, sent.Load, 500*time.Millisecond)
	held := m0.EarlyBytes(1)
	t.Logf("sender stalled after %d of %d frames; receiver holds %d early bytes", stalled, frames, held)
	assert.Less(t, stalled, int64(frames), "the sender was never held back")
	assert.LessOrEqual(t, held, limit, "the receiver held more than its limit")
	assert.Greater(t, held, 0, "nothing was stashed: the test did not exercise the early path")

	got := make([]byte, len(data))
	rs := make([]transport.Recv, frames)
	for j := range rs {
		rs[j] = transport.Recv{Peer: 1, Want: collFrame(j, seg), Buf: got[j*seg : (j+1)*seg]}
		m0.Post(&rs[j])
		// The bound holds all along, not only while nothing is posted.
		require.LessOrEqual(t, m0.EarlyBytes(1), limit)
	}
	for j := range rs {
		require.NoError(t, m0.Wait(&rs[j], time.Now().Add(20*time.Second)), "frame %d", j)
	}
	require.NoError(t, <-sendErr)
	assert.Equal(t, data, got, "the data changed on its way through the bound")
	assert.Equal(t, 0, m0.EarlyBytes(1))
}

// TestFrameAboveTheLimitWaitsForItsReceive: a frame larger than the limit is
// never kept; it lands in its receive's buffer once that is posted, and
// frames behind it (within the limit) follow.
func TestFrameAboveTheLimitWaitsForItsReceive(t *testing.T) {
	const limit = 64 << 10
	c0, c1 := connected(t)
	m0, m1 := transport.NewMatcher(0, 2), transport.NewMatcher(1, 2)
	m0.SetEarlyLimit(limit)
	l0, l1 := NewLink(c0, 1, m0), NewLink(c1, 0, m1)
	defer l0.Close()
	defer l1.Close()
	sizes := []int{1 << 20, 0, 1000, 4 << 20, 77}
	var payloads [][]byte
	for i, n := range sizes {
		p := make([]byte, n)
		for k := range p {
			p[k] = byte(k*31 + i)
		}
		payloads = append(payloads, p)
	}
	sendErr := make(chan error, 1)
	go func() {
		for j, p := range payloads {
			h := collFrame(j, len(p))
			if err := l1.Send(&h, p, time.Now().Add(30*time.Second)); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- nil
	}()
	time.Sleep(200 * time.Millisecond)
	assert.LessOrEqual(t, m0.EarlyBytes(1), limit)
	for j, p := range payloads {
		r := transport.Recv{Peer: 1, Want: collFrame(j, len(p)), Buf: make([]byte, len(p))}
		m0.Post(&r)
		require.NoError(t, m0.Wait(&r, time.Now().Add(10*time.Second)))
		assert.Equal(t, p, r.Buf, "frame %d", j)
		assert.LessOrEqual(t, m0.EarlyBytes(1), limit)
	}
	require.NoError(t, <-sendErr)
}

// TestHeldBackSenderTimesOut: a sender whose receiver never posts gets its
// deadline's error naming the peer, and closing the receiver's link while
// it holds a frame back returns at once instead of hanging.
func TestHeldBackSenderTimesOut(t *testing.T) {
	c0, c1 := connected(t)
	m0, m1 := transport.NewMatcher(0, 2), transport.NewMatcher(1, 2)
	m0.SetEarlyLimit(1 << 20)
	l0, l1 := NewLink(c0, 1, m0), NewLink(c1, 0, m1)
	defer l1.Close()
	p := make([]byte, 64<<20)
	h := collFrame(0, len(p))
	start := time.Now()
	err := l1.Send(&h, p, time.Now().Add(time.Second))
	require.ErrorIs(t, err, transport.ErrTimeout)
	assert.Contains(t, err.Error(), "rank 0")
	assert.Contains(t, err.Error(), "GOHCCL_EARLY_BYTES")
	assert.Less(t, time.Since(start), 5*time.Second)
	assert.LessOrEqual(t, m0.EarlyBytes(1), 1<<20)

	closed := make(chan struct{})
	go func() { l0.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("closing a link whose receive side holds a frame back hung")
	}
}

// TestPointToPointOutOfOrderWithinTheLimit: receives posted in another
// order than the sends still complete while the early frames fit.
func TestPointToPointOutOfOrderWithinTheLimit(t *testing.T) {
	c0, c1 := connected(t)
	m0, m1 := transport.NewMatcher(0, 2), transport.NewMatcher(1, 2)
	m0.SetEarlyLimit(1 << 20)
	l0, l1 := NewLink(c0, 1, m0), NewLink(c1, 0, m1)
	defer l0.Close()
	defer l1.Close()
	const n = 8
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for tag := 0; tag < n; tag++ {
			p := make([]byte, 100<<10)
			for k := range p {
				p[k] = byte(tag)
			}
			h := transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindSend, DType: reduce.Uint8, Count: uint64(len(p))}, Tag: uint64(tag), Len: uint32(len(p))}
			assert.NoError(t, l1.Send(&h, p, time.Now().Add(10*time.Second)))
		}
	}()
	for tag := n - 1; tag >= 0; tag-- {
		want := transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindSend, DType: reduce.Uint8, Count: 100 << 10}, Tag: uint64(tag), Len: 100 << 10}
		r := transport.Recv{Peer: 1, Want: want, Buf: make([]byte, 100<<10)}
		m0.Post(&r)
		require.NoError(t, m0.Wait(&r, time.Now().Add(10*time.Second)))
		for _, b := range r.Buf {
			if b != byte(tag) {
				t.Fatalf("tag %d received byte %d", tag, b)
			}
		}
	}
	wg.Wait()
}
