package tcp

import (
	"crypto/ecdh"
	"errors"
	"net"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// testIdentity is an identity that both ends of a test connection use: one
// key pair stands for every rank, so rank 0 and rank 1 derive the same key.
func testIdentity() *Identity {
	key, err := NewKey()
	if err != nil {
		panic(err)
	}
	id := &Identity{Size: 2, Key: key, Public: []*ecdh.PublicKey{key.PublicKey(), key.PublicKey()}}
	copy(id.CommID[:], "comm-id-0123456")
	return id
}

func TestHelloRejectsMalformed(t *testing.T) {
	id := testIdentity()
	good := hello{Version: protoVersion, From: 1, To: 0, Size: 2, CommID: id.CommID}
	var b [helloSize]byte
	good.encode(b[:])
	h, err := decodeHello(b[:])
	require.NoError(t, err)
	require.NoError(t, h.verify(id, 0))

	cases := map[string]func(h *hello, b []byte){
		"magic":    func(h *hello, b []byte) { b[0] = 'X' },
		"version":  func(h *hello, b []byte) { b[8] = 42 },
		"reserved": func(h *hello, b []byte) { b[79] = 1 },
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
	good := hello{Version: protoVersion, From: 1, To: 0, Size: 2, CommID: id.CommID}
	var b [helloSize]byte
	good.encode(b[:])
	f.Add(b[:])
	f.Add(make([]byte, helloSize))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, err := decodeHello(in)
		if err != nil {
			return
		}
		var out [helloSize]byte
		h.encode(out[:])
		if string(out[:]) != string(in) {
			t.Fatalf("decode/encode changed the handshake: %x -> %x", in, out)
		}
		if h.verify(id, 0) == nil && (h.CommID != id.CommID || h.From != 1 || h.To != 0) {
			t.Fatalf("verified a handshake that is not rank 1's of this communicator: %+v", h)
		}
	})
}

// TestStrayConnectionsDropped opens hostile connections to the listener
// (garbage, a truncated handshake, an oversize one, another communicator's,
// an impostor holding another key, a silent one) while the real peer connects; the bootstrap
// must take the real peer and drop the rest.
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
	truncated, err := net.Dial("tcp", ln.Addr())
	require.NoError(t, err)
	var hb [helloSize]byte
	(&hello{Version: protoVersion, From: 1, To: 0, Size: 2, CommID: id.CommID}).encode(hb[:])
	truncated.Write(hb[:helloSize/2])
	truncated.Close()
	oversize, err := net.Dial("tcp", ln.Addr())
	require.NoError(t, err)
	defer oversize.Close()
	go oversize.Write(make([]byte, 1<<20)) // zeros: bad magic after 64 bytes; the rest is never read
	otherComm, err := net.Dial("tcp", ln.Addr())
	require.NoError(t, err)
	defer otherComm.Close()
	other := hello{Version: protoVersion, From: 1, To: 0, Size: 2, CommID: id.CommID}
	other.CommID[0] ^= 1
	other.encode(hb[:])
	otherComm.Write(hb[:])
	// An impostor that knows the communicator and every public key but holds
	// another private key.
	bad := *id
	bad.Key, _ = NewKey()
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

	// Silent, garbage, truncated, oversize and another communicator's
	// connections were all accepted before the real peer's, and AcceptPeers
	// waits for every handshake it started: each was dropped with a warning.
	mu.Lock()
	assert.GreaterOrEqual(t, len(warnings), 5, "rejected connections are logged")
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

// TestListenBindsTheGivenAddress: the listener binds the address bootstrap
// chose, never every interface unless asked for by "0.0.0.0", and refuses
// what is not an address instead of binding everything.
func TestListenBindsTheGivenAddress(t *testing.T) {
	ln, err := Listen("127.0.0.1")
	require.NoError(t, err)
	host, _, err := net.SplitHostPort(ln.Addr())
	require.NoError(t, err)
	assert.Equal(t, "127.0.0.1", host)
	bound := ln.ln.Addr().(*net.TCPAddr)
	assert.False(t, bound.IP.IsUnspecified(), "bound to every interface: %v", bound)
	ln.Close()

	for _, bad := range []string{"", "lo", "localhost", "127.0.0.1:80"} {
		_, err := Listen(bad)
		assert.ErrorContains(t, err, "not an IP address", "Listen(%q)", bad)
	}

	all, err := Listen("0.0.0.0")
	require.NoError(t, err, "every interface, when asked")
	assert.True(t, all.ln.Addr().(*net.TCPAddr).IP.IsUnspecified())
	all.Close()
}

// connected returns both ends of a handshaken connection between rank 0
// (accepting) and rank 1 (dialing).
func connected(t *testing.T) (r0, r1 *net.TCPConn) {
	t.Helper()
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
	r1 = <-dialed
	require.NotNil(t, r1)
	return got[1], r1
}

// TestAbortFrameOverTCP: a peer that sends its abort frame and then closes
// the connection is reported with its cause, not as a bare connection loss.
func TestAbortFrameOverTCP(t *testing.T) {
	c0, c1 := connected(t)
	m0, m1 := transport.NewMatcher(0, 2), transport.NewMatcher(1, 2)
	l0, l1 := NewLink(c0, 1, m0), NewLink(c1, 0, m1)
	defer l0.Close()
	r := transport.Recv{Peer: 1, Want: transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindBarrier}, Seq: 2}}
	m0.Post(&r)
	h, text := transport.AbortFrame(2, errors.New("barrier #2 on rank 1 failed: collective mismatch: rank 1 (this process) expected x but rank 2 sent y"))
	require.NoError(t, l1.Send(&h, text, time.Now().Add(time.Second)))
	l1.Close()
	err := m0.Wait(&r, time.Now().Add(5*time.Second))
	require.ErrorIs(t, err, transport.ErrPeerLost)
	assert.Equal(t, "rank 1 aborted: barrier #2 on rank 1 failed: collective mismatch: rank 1 (this process) expected x but rank 2 sent y", err.Error())
	require.Equal(t, err, m0.Err())
}

// TestCorruptFramesDropTheLink: an authenticated peer whose bytes are not
// frames (truncated, oversize, garbage) fails the receives waiting on it
// promptly with a clear error (ErrProtocol, or ErrPeerLost for a stream that
// ends inside a header), and the connection is closed.
func TestCorruptFramesDropTheLink(t *testing.T) {
	good := transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindBarrier}, Seq: 1}
	cases := map[string]func() []byte{
		"oversize": func() []byte {
			h := good
			h.Len = transport.MaxPayload
			var b [transport.HeaderSize]byte
			h.Encode(b[:])
			b[39] = 0xff // more than MaxPayload
			return b[:]
		},
		"abort too long": func() []byte {
			h, _ := transport.AbortFrame(1, errors.New("x"))
			h.Len = transport.MaxAbortText + 1
			var b [transport.HeaderSize]byte
			h.Encode(b[:])
			return b[:]
		},
		"garbage": func() []byte { return []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n0123456789abcdef") },
		"truncated": func() []byte {
			var b [transport.HeaderSize]byte
			good.Encode(b[:])
			return b[:17]
		},
	}
	want := map[string]string{"oversize": "corrupt frame", "abort too long": "corrupt frame",
		"garbage": "corrupt frame", "truncated": "closed the connection"}
	for name, bytes := range cases {
		t.Run(name, func(t *testing.T) {
			c0, c1 := connected(t)
			defer c1.Close()
			m0 := transport.NewMatcher(0, 2)
			l0 := NewLink(c0, 1, m0)
			defer l0.Close()
			r := transport.Recv{Peer: 1, Want: good}
			m0.Post(&r)
			_, err := c1.Write(bytes())
			require.NoError(t, err)
			if name == "truncated" {
				c1.Close()
			}
			start := time.Now()
			err = m0.Wait(&r, time.Now().Add(5*time.Second))
			if name == "truncated" {
				require.ErrorIs(t, err, transport.ErrPeerLost)
			} else {
				require.ErrorIs(t, err, transport.ErrProtocol)
			}
			assert.Contains(t, err.Error(), "rank 1")
			assert.Contains(t, err.Error(), want[name])
			assert.Less(t, time.Since(start), 2*time.Second)
			// The link closed its end: the peer reads EOF, not a hang.
			c1.SetReadDeadline(time.Now().Add(2 * time.Second))
			_, err = c1.Read(make([]byte, 1))
			assert.Error(t, err)
			assert.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the corrupt peer's connection was left open")
		})
	}
}
