package tcp

import (
	"crypto/ecdh"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/transport"
)

// pairIdentities returns the identities of ranks 0 and 1 of one
// communicator, each with its own key pair.
func pairIdentities(t *testing.T) (id0, id1 *Identity) {
	k0, err := NewKey()
	require.NoError(t, err)
	k1, err := NewKey()
	require.NoError(t, err)
	pub := []*ecdh.PublicKey{k0.PublicKey(), k1.PublicKey()}
	id0 = &Identity{Size: 2, Key: k0, Public: pub}
	copy(id0.CommID[:], "comm-id-0123456")
	id1 = &Identity{Size: 2, Key: k1, Public: pub, CommID: id0.CommID}
	return id0, id1
}

// TestImpostorCannotHandshake: whoever knows everything the store holds
// (communicator id, every public key, every address) but not a rank's
// private key cannot pass for that rank, dialing or accepting; the real
// rank still connects afterwards.
func TestImpostorCannotHandshake(t *testing.T) {
	id0, id1 := pairIdentities(t)
	impostorKey, err := NewKey()
	require.NoError(t, err)
	impostor := &Identity{Size: 2, Key: impostorKey, Public: id0.Public, CommID: id0.CommID}

	ln, err := Listen("127.0.0.1")
	require.NoError(t, err)
	defer ln.Close()
	dialed := make(chan error, 2)
	go func() {
		_, err := Dial(ln.Addr(), impostor, 1, 0, time.Now().Add(time.Second))
		dialed <- err
	}()
	var real *net.TCPConn
	go func() {
		time.Sleep(200 * time.Millisecond)
		var err error
		real, err = Dial(ln.Addr(), id1, 1, 0, time.Now().Add(5*time.Second))
		dialed <- err
	}()
	var warnings []string
	got, err := ln.AcceptPeers(id0, 0, []int{1}, time.Now().Add(5*time.Second), func(f string, a ...any) {
		warnings = append(warnings, f)
	})
	require.NoError(t, err)
	errs := []error{<-dialed, <-dialed}
	require.Equal(t, 1, countNil(errs), "exactly the real rank connects: %v", errs)
	for _, e := range errs {
		if e != nil {
			assert.Contains(t, e.Error(), "key")
		}
	}
	assert.NotEmpty(t, warnings)
	// The real rank's connection carries frames.
	m1 := transport.NewMatcher(1, 2)
	l0, l1 := NewLink(got[1], 1, transport.NewMatcher(0, 2)), NewLink(real, 0, m1)
	defer l0.Close()
	defer l1.Close()
	h := transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindBarrier}, Seq: 1}
	r := transport.Recv{Peer: 0, Want: h}
	m1.Post(&r)
	require.NoError(t, l0.Send(&h, nil, time.Now().Add(time.Second)))
	require.NoError(t, m1.Wait(&r, time.Now().Add(5*time.Second)))

	// An impostor listening where rank 0 is expected cannot answer rank 1.
	fake, err := Listen("127.0.0.1")
	require.NoError(t, err)
	defer fake.Close()
	go fake.AcceptPeers(&Identity{Size: 2, Key: impostorKey, Public: id0.Public, CommID: id0.CommID}, 0, []int{1},
		time.Now().Add(2*time.Second), func(string, ...any) {})
	_, err = Dial(fake.Addr(), id1, 1, 0, time.Now().Add(2*time.Second))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "could not prove it holds rank 0's key")
}

func countNil(errs []error) int {
	n := 0
	for _, e := range errs {
		if e == nil {
			n++
		}
	}
	return n
}

// TestDialGivesUpAfterTheWindow: an address that refuses connections is
// retried for the window, not until the bootstrap's deadline.
func TestDialGivesUpAfterTheWindow(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	_, id1 := pairIdentities(t)
	start := time.Now()
	_, err = DialPeer(t.Context(), addr, id1, 1, 0, time.Now().Add(time.Minute), time.Second)
	require.ErrorIs(t, err, transport.ErrPeerLost)
	assert.Contains(t, err.Error(), "could not reach rank 0 at "+addr)
	assert.Less(t, time.Since(start), 3*time.Second)
}

// TestListenRange: the bound port lies in the range; a range whose every
// port is taken is an error naming it.
func TestListenRange(t *testing.T) {
	a, err := Listen("127.0.0.1")
	require.NoError(t, err)
	_, port, _ := net.SplitHostPort(a.Addr())
	p, _ := strconv.Atoi(port)
	a.Close()
	b, err := ListenRange("127.0.0.1", p, p)
	require.NoError(t, err, "the one free port of a range of one")
	assert.Equal(t, "127.0.0.1:"+port, b.Addr())
	_, err = ListenRange("127.0.0.1", p, p)
	assert.ErrorContains(t, err, "every port in "+port+"-"+port+" is in use")
	b.Close()
	_, err = ListenRange("127.0.0.1", 10, 5)
	assert.ErrorContains(t, err, "not a port range")
}
