package tcp

import (
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/transport"
)

// connectedStriped returns both ends of a pair of ranks joined by n
// connections: rank 0's (accepted) and rank 1's (dialed), stripe 0 first.
func connectedStriped(t testing.TB, n int) (c0, c1 []*net.TCPConn) {
	t.Helper()
	ln, err := Listen("127.0.0.1")
	require.NoError(t, err)
	defer ln.Close()
	id := testIdentity()
	type dialed struct {
		cs  []*net.TCPConn
		err error
	}
	ch := make(chan dialed, 1)
	go func() {
		cs, err := DialStripes(ln.Addr(), id, 1, 0, n, time.Now().Add(5*time.Second))
		ch <- dialed{cs, err}
	}()
	got, err := ln.AcceptStriped(id, 0, []int{1}, time.Now().Add(5*time.Second), func(f string, a ...any) { t.Logf(f, a...) })
	require.NoError(t, err)
	d := <-ch
	require.NoError(t, d.err)
	require.Len(t, got[1], n)
	require.Len(t, d.cs, n)
	return got[1], d.cs
}

func stripedPair(t testing.TB, n int) (l0, l1 *Link, m0, m1 *transport.Matcher) {
	c0, c1 := connectedStriped(t, n)
	m0, m1 = transport.NewMatcher(0, 2), transport.NewMatcher(1, 2)
	m0.SetEarlyLimit(64 << 20)
	m1.SetEarlyLimit(64 << 20)
	l0, l1 = NewStripedLink(c0, 1, m0), NewStripedLink(c1, 0, m1)
	require.Equal(t, n, l0.Stripes())
	require.Equal(t, n, l1.Stripes())
	return
}

// TestStripedFramesArriveWhole: frames of uneven sizes (0 bytes, below the
// striping threshold, just above it, odd sizes that leave a remainder),
// sent in a stream over 1-4 connections and both directions, arrive whole
// and in order, into posted receives and as early frames alike.
func TestStripedFramesArriveWhole(t *testing.T) {
	sizes := []int{0, 1, 100, 2*stripeMinPart - 1, 2 * stripeMinPart, 2*stripeMinPart + 3,
		1<<20 + 17, 3<<20 + 5, 77, 8 << 20, 5*stripeMinPart + 63}
	for _, n := range []int{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("%dconns", n), func(t *testing.T) {
			l0, l1, m0, m1 := stripedPair(t, n)
			defer l0.Close()
			defer l1.Close()
			rng := rand.New(rand.NewPCG(uint64(n), 7))
			for dir, pair := range []struct {
				from *Link
				to   *transport.Matcher
				peer int
			}{{l1, m0, 1}, {l0, m1, 0}} {
				payloads := make([][]byte, len(sizes))
				for i, sz := range sizes {
					payloads[i] = make([]byte, sz)
					for k := range payloads[i] {
						payloads[i][k] = byte(rng.Uint32())
					}
				}
				// The first half of the receives is posted before the
				// sends, the rest after: early frames take the same path.
				rs := make([]transport.Recv, len(sizes))
				post := func(i int) {
					rs[i] = transport.Recv{Peer: pair.peer, Want: collFrame(i, sizes[i]), Buf: make([]byte, sizes[i])}
					pair.to.Post(&rs[i])
				}
				half := len(sizes) / 2
				for i := 0; i < half; i++ {
					post(i)
				}
				for i, p := range payloads {
					h := collFrame(i, len(p))
					require.NoError(t, pair.from.Send(&h, p, time.Now().Add(10*time.Second)), "dir %d frame %d", dir, i)
				}
				for i := half; i < len(sizes); i++ {
					post(i)
				}
				for i := range rs {
					require.NoError(t, pair.to.Wait(&rs[i], time.Now().Add(10*time.Second)), "dir %d frame %d", dir, i)
					require.Equal(t, payloads[i], rs[i].Buf, "dir %d frame %d of %d bytes", dir, i, sizes[i])
				}
			}
		})
	}
}

// TestStripeSplitCoversTheFrame: the parts split makes tile the frame
// exactly, none below the minimum part, for every stripe count.
func TestStripeSplitCoversTheFrame(t *testing.T) {
	for stripes := 1; stripes <= MaxStripes; stripes++ {
		s := stripeSet{conns: make([]*net.TCPConn, stripes-1)}
		for _, n := range []int{0, 1, stripeMinPart, 2*stripeMinPart - 1, 2 * stripeMinPart, 1<<20 + 1, 64<<20 - 3} {
			k, first, base := s.split(n)
			require.LessOrEqual(t, k, stripes)
			if k == 1 {
				assert.Equal(t, n, first)
				continue
			}
			assert.Equal(t, n, first+(k-1)*base, "n=%d stripes=%d", n, stripes)
			assert.GreaterOrEqual(t, base, stripeMinPart-64)
			assert.GreaterOrEqual(t, first, base)
			assert.Zero(t, base%64)
		}
	}
}

// TestStripeConnectionDeathIsAnError: one stripe connection dying (on the
// receiver's side or the sender's) makes the receive and the sends fail
// with an error naming the peer, promptly, never a hang.
func TestStripeConnectionDeathIsAnError(t *testing.T) {
	for _, side := range []string{"receiver", "sender"} {
		t.Run(side, func(t *testing.T) {
			c0, c1 := connectedStriped(t, 3)
			m0, m1 := transport.NewMatcher(0, 2), transport.NewMatcher(1, 2)
			l0, l1 := NewStripedLink(c0, 1, m0), NewStripedLink(c1, 0, m1)
			defer l0.Close()
			defer l1.Close()
			const n = 8 << 20
			r := transport.Recv{Peer: 1, Want: collFrame(0, n), Buf: make([]byte, n)}
			m0.Post(&r)
			if side == "receiver" {
				c0[2].Close()
			} else {
				c1[2].Close()
			}
			start := time.Now()
			h := collFrame(0, n)
			sendErr := l1.Send(&h, make([]byte, n), time.Now().Add(20*time.Second))
			err := m0.Wait(&r, time.Now().Add(20*time.Second))
			require.Error(t, err)
			assert.ErrorIs(t, err, transport.ErrPeerLost)
			assert.Contains(t, err.Error(), "rank 1")
			// The sender learns it too: now, or at its next send.
			if sendErr == nil {
				h2 := collFrame(1, n)
				for i := 0; i < 4 && sendErr == nil; i++ {
					sendErr = l1.Send(&h2, make([]byte, n), time.Now().Add(10*time.Second))
				}
			}
			require.Error(t, sendErr)
			assert.Contains(t, sendErr.Error(), "rank 0")
			assert.Less(t, time.Since(start), 10*time.Second)
		})
	}
}

// TestStripedHandshakeRefusesBadStripes: a handshake naming a stripe at or
// beyond its count, or more stripes than allowed, is refused.
func TestStripedHandshakeRefusesBadStripes(t *testing.T) {
	id := testIdentity()
	for _, c := range []struct{ stripe, stripes uint8 }{{3, 3}, {0, MaxStripes + 1}, {9, 2}} {
		h := hello{Version: protoVersion, From: 1, To: 0, Size: 2, CommID: id.CommID, Stripe: c.stripe, Stripes: c.stripes}
		var b [helloSize]byte
		h.encode(b[:])
		_, err := decodeHello(b[:])
		assert.Error(t, err, "stripe %d of %d", c.stripe, c.stripes)
	}
	// One connection is encoded as before striping existed: zeros.
	h := hello{Version: protoVersion, From: 1, To: 0, Size: 2, CommID: id.CommID, Stripes: 1}
	var b [helloSize]byte
	h.encode(b[:])
	assert.Equal(t, make([]byte, 8), b[72:80])
}
