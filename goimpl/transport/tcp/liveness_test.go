package tcp

import (
	"net"
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/transport"
)

// isolatedLoopback makes a network namespace of its own for the test (on a
// thread that is then discarded), with loopback up, and returns two ends of
// a handshaken connection in it and a function that takes its loopback
// down: the peer's host is then unreachable without a FIN or RST, as when a
// cable is pulled. It skips the test where namespaces cannot be made.
func isolatedLoopback(t *testing.T) (c0, c1 *net.TCPConn, cut func()) {
	t.Helper()
	type made struct {
		c0, c1 *net.TCPConn
		ctl    int
		err    error
		skip   string
	}
	ch := make(chan made, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread leaves with the goroutine
		if err := syscall.Unshare(syscall.CLONE_NEWNET); err != nil {
			ch <- made{skip: "cannot make a network namespace: " + err.Error()}
			return
		}
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM, 0)
		if err != nil {
			ch <- made{err: err}
			return
		}
		if err := setLoopback(fd, true); err != nil {
			ch <- made{err: err}
			return
		}
		a, b, err := rawPair()
		ch <- made{c0: a, c1: b, ctl: fd, err: err}
	}()
	m := <-ch
	if m.skip != "" {
		t.Skip(m.skip)
	}
	require.NoError(t, m.err)
	t.Cleanup(func() { m.c0.Close(); m.c1.Close(); syscall.Close(m.ctl) })
	return m.c0, m.c1, func() { require.NoError(t, setLoopback(m.ctl, false)) }
}

// setLoopback sets lo up or down in the namespace of the socket fd.
func setLoopback(fd int, up bool) error {
	var req struct {
		name  [16]byte
		flags uint16
		_     [22]byte
	}
	copy(req.name[:], "lo")
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&req))); e != 0 {
		return e
	}
	if up {
		req.flags |= syscall.IFF_UP
	} else {
		req.flags &^= syscall.IFF_UP
	}
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&req))); e != 0 {
		return e
	}
	return nil
}

// rawPair returns both ends of a plain TCP connection on loopback, made on
// the calling thread (so in its network namespace); no handshake.
func rawPair() (r0, r1 *net.TCPConn, err error) {
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	if r1, err = net.DialTCP("tcp", nil, ln.Addr().(*net.TCPAddr)); err != nil {
		return nil, nil, err
	}
	if r0, err = ln.AcceptTCP(); err != nil {
		r1.Close()
		return nil, nil, err
	}
	return r0, r1, nil
}

// TestSilentPeerDeclaredLost: once the peer's host stops answering (its
// loopback taken down), a receive waiting on an idle link and a send in
// progress both fail within the peer timeout and a tick or two, naming the
// peer, long before their own deadlines.
func TestSilentPeerDeclaredLost(t *testing.T) {
	const timeout = 2 * time.Second
	c0, c1, cut := isolatedLoopback(t)
	m0, m1 := transport.NewMatcher(0, 2), transport.NewMatcher(1, 2)
	l0, l1 := NewLink(c0, 1, m0), NewLink(c1, 0, m1)
	defer l0.Close()
	defer l1.Close()
	l0.Watch(PeerName(1, "host-b", "10.0.0.2:4000"), timeout)
	l1.Watch(PeerName(0, "host-a", "10.0.0.1:4000"), timeout)

	// Before the cut, an idle link stays up past the timeout: keepalive
	// probes are answered.
	time.Sleep(timeout + time.Second)
	require.NoError(t, m0.Health())
	require.NoError(t, m1.Health())

	idle := transport.Recv{Peer: 1, Want: transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindBarrier}, Seq: 1}}
	m0.Post(&idle)
	sent := make(chan error, 1)
	go func() {
		// Point-to-point frames, stashed by rank 0 (not matched to its
		// receive) until its early-frame limit, then held back by TCP: the
		// sends go on until one fails.
		buf := make([]byte, 8<<20)
		for tag := uint64(1); ; tag++ {
			h := transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindSend, Count: 8 << 20}, Tag: tag, Len: 8 << 20}
			if err := l1.Send(&h, buf, time.Now().Add(time.Minute)); err != nil {
				sent <- err
				return
			}
		}
	}()
	time.Sleep(100 * time.Millisecond) // the send is under way
	cut()
	start := time.Now()

	err := m0.Wait(&idle, time.Now().Add(time.Minute))
	took := time.Since(start)
	require.ErrorIs(t, err, transport.ErrPeerLost)
	assert.Contains(t, err.Error(), "rank 1 (host host-b at 10.0.0.2:4000) has not answered")
	assert.Less(t, took, timeout+3*time.Second, "the waiting receive: %v", err)

	select {
	case err = <-sent:
	case <-time.After(timeout + 3*time.Second - time.Since(start)):
		t.Fatal("a send to a silent peer still blocks past the peer timeout")
	}
	require.ErrorIs(t, err, transport.ErrPeerLost)
	assert.Contains(t, err.Error(), "rank 0 (host host-a at 10.0.0.1:4000) has not answered")
}

// TestSlowReaderIsNotLost: a live peer that takes nothing for longer than
// the peer timeout (its socket full, a zero window) is not declared lost:
// its kernel answers the window probes. The send times out at its own
// deadline instead, and the data flows once the peer reads.
func TestSlowReaderIsNotLost(t *testing.T) {
	const timeout = 2 * time.Second
	c0, c1 := connected(t)
	defer c0.Close()
	require.NoError(t, c0.SetReadBuffer(4<<10))
	m1 := transport.NewMatcher(1, 2)
	l1 := NewLink(c1, 0, m1)
	defer l1.Close()
	l1.Watch(PeerName(0, "host-a", ""), timeout)
	h := transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindBarrier}, Seq: 1, Len: 64 << 20}
	err := l1.Send(&h, make([]byte, 64<<20), time.Now().Add(3*timeout))
	require.ErrorIs(t, err, transport.ErrTimeout, "a slow reader is not a lost peer")
	require.NoError(t, m1.Health())
	// The link is still alive: the reader drains what was sent.
	c0.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c0.Read(make([]byte, 1<<20))
	require.NoError(t, err)
	assert.Positive(t, n)
}

func TestTCPInfoRule(t *testing.T) {
	const timeout = 5 * time.Second
	for _, c := range []struct {
		name string
		info tcpInfo
		lost bool
	}{
		{"idle, answered", tcpInfo{lastDataRecv: 60000, lastAckRecv: 900}, false},
		{"idle, probes unanswered", tcpInfo{probes: 3, lastDataRecv: 60000, lastAckRecv: 5200}, true},
		{"probes unanswered, not yet", tcpInfo{probes: 3, lastDataRecv: 60000, lastAckRecv: 4000}, false},
		{"retransmitting", tcpInfo{retransmits: 4, unacked: 10, lastDataRecv: 9000, lastAckRecv: 6000}, true},
		{"data flowing in, acks silent", tcpInfo{retransmits: 1, lastDataRecv: 10, lastAckRecv: 8000}, false},
		{"zero window, probe answered", tcpInfo{lastDataRecv: 60000, lastAckRecv: 6000}, false},
	} {
		assert.Equal(t, c.lost, c.info.lost(timeout), c.name)
	}
	// The offsets read a live socket's tcp_info.
	c0, c1 := connected(t)
	defer c0.Close()
	defer c1.Close()
	st, err := tcpState(c0)
	require.NoError(t, err)
	assert.Zero(t, st.probes)
	assert.Less(t, st.lastAckRecv, uint32(60000))
	assert.False(t, st.lost(timeout))
}
