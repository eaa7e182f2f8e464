package tcp

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
)

func testIdentity() *Identity {
	id := &Identity{Size: 2}
	copy(id.CommID[:], "comm-id-0123456")
	copy(id.Token[:], "secret-token-xyz")
	return id
}

func TestHelloRejectsMalformed(t *testing.T) {
	id := testIdentity()
	good := hello{Version: protoVersion, From: 1, To: 0, Size: 2, CommID: id.CommID, Token: id.Token}
	var b [helloSize]byte
	good.encode(b[:])
	h, err := decodeHello(b[:])
	require.NoError(t, err)
	require.NoError(t, h.verify(id, 0))

	cases := map[string]func(h *hello, b []byte){
		"magic":    func(h *hello, b []byte) { b[0] = 'X' },
		"version":  func(h *hello, b []byte) { b[8] = 42 },
		"reserved": func(h *hello, b []byte) { b[63] = 1 },
		"token":    func(h *hello, b []byte) { b[45] ^= 1 },
		"comm":     func(h *hello, b []byte) { b[30] ^= 1 },
		"to":       func(h *hello, b []byte) { b[16] = 1 },
		"from":     func(h *hello, b []byte) { b[12] = 0 },
		"size":     func(h *hello, b []byte) { b[20] = 3 },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			var b [helloSize]byte
			good.encode(b[:])
			mutate(&good, b[:])
			h, err := decodeHello(b[:])
			if err == nil {
				err = h.verify(id, 0)
			}
			require.Error(t, err)
		})
	}
	_, err = decodeHello(b[:10])
	require.Error(t, err)
}

func FuzzHelloDecode(f *testing.F) {
	id := testIdentity()
	good := hello{Version: protoVersion, From: 1, To: 0, Size: 2, CommID: id.CommID, Token: id.Token}
	var b [helloSize]byte
	good.encode(b[:])
	f.Add(b[:])
	f.Add(make([]byte, helloSize))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := decodeHello(in)
		if err == nil {
			_ = h.verify(id, 0) // must not panic
		}
	})
}

// TestStrayConnectionsDropped opens hostile connections to the listener
// (garbage, a wrong token, a silent one) while the real peer connects; the
// bootstrap must take the real peer and drop the rest.
func TestStrayConnectionsDropped(t *testing.T) {
	id := testIdentity()
	ln, err := Listen("127.0.0.1")
	require.NoError(t, err)
	defer ln.Close()
	var warnings []string
	var mu sync.Mutex
	warn := func(format string, args ...any) {
		mu.Lock()
		warnings = append(warnings, format)
		mu.Unlock()
	}

	silent, err := net.Dial("tcp", ln.Addr())
	require.NoError(t, err)
	defer silent.Close()
	garbage, err := net.Dial("tcp", ln.Addr())
	require.NoError(t, err)
	garbage.Write([]byte("GET / HTTP/1.0\r\n\r\n" + string(make([]byte, 64))))
	defer garbage.Close()
	bad := *id
	bad.Token[0] ^= 1
	go Dial(ln.Addr(), &bad, 1, 0, time.Now().Add(500*time.Millisecond))

	var peer *net.TCPConn
	var dialErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(100 * time.Millisecond)
		peer, dialErr = Dial(ln.Addr(), id, 1, 0, time.Now().Add(5*time.Second))
	}()
	got, err := ln.AcceptPeers(id, 0, []int{1}, time.Now().Add(5*time.Second), warn)
	require.NoError(t, err)
	<-done
	require.NoError(t, dialErr)
	require.NotNil(t, got[1])

	// The accepted connection carries frames both ways.
	ma, mb := transport.NewMatcher(0, 2), transport.NewMatcher(1, 2)
	la, lb := NewLink(got[1], 1, ma), NewLink(peer, 0, mb)
	defer la.Close()
	defer lb.Close()
	h := transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindSend, DType: reduce.Uint8, Count: 5}, Tag: 3, Len: 5}
	var r transport.Recv
	r = transport.Recv{Peer: 0, Want: h, Buf: make([]byte, 5)}
	mb.Post(&r)
	require.NoError(t, la.Send(&h, []byte("hello"), time.Now().Add(time.Second)))
	require.NoError(t, mb.Wait(&r, time.Now().Add(5*time.Second)))
	assert.Equal(t, "hello", string(r.Buf))

	mu.Lock()
	assert.GreaterOrEqual(t, len(warnings), 1, "rejected connections are logged")
	mu.Unlock()
}

// TestPeerCloseFailsWaiters checks that a receive waiting on a peer fails
// promptly when the peer's connection closes, rather than at its deadline.
func TestPeerCloseFailsWaiters(t *testing.T) {
	ln, err := Listen("127.0.0.1")
	require.NoError(t, err)
	defer ln.Close()
	id := testIdentity()
	dialed := make(chan *net.TCPConn, 1)
	go func() {
		c, _ := Dial(ln.Addr(), id, 1, 0, time.Now().Add(5*time.Second))
		dialed <- c
	}()
	got, err := ln.AcceptPeers(id, 0, []int{1}, time.Now().Add(5*time.Second), func(string, ...any) {})
	require.NoError(t, err)
	m := transport.NewMatcher(0, 2)
	l := NewLink(got[1], 1, m)
	defer l.Close()
	var r transport.Recv
	r = transport.Recv{Peer: 1, Want: transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindBarrier}}}
	m.Post(&r)
	start := time.Now()
	peer := <-dialed
	require.NotNil(t, peer)
	peer.Close()
	err = m.Wait(&r, time.Now().Add(10*time.Second))
	require.ErrorIs(t, err, transport.ErrPeerLost)
	assert.Contains(t, err.Error(), "rank 1")
	assert.Less(t, time.Since(start), 3*time.Second)
}
