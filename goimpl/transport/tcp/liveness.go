package tcp

import (
	"fmt"
	"net"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/gohccl/gohccl/goimpl/transport"
)

// Liveness: a peer whose host is cut off (link down, host powered off) sends
// no FIN or RST, so the receive side would wait out the op's deadline. Each
// link therefore asks the kernel, every tick, when it last heard from the
// peer's kernel (data or an ACK, tcp_info's last_data_recv and
// last_ack_recv) and whether it is waiting for an answer (a retransmission
// or a probe unanswered). Keepalive probes make an idle link ask too. A peer
// silent for the link's timeout while this end waits for an answer is lost.
//
// Why not TCP_USER_TIMEOUT alone: since Linux 5.11 it also aborts a
// connection whose peer keeps a zero window for that long, that is a live
// peer that reads slowly (a rank busy elsewhere while its socket fills).
// Zero-window probes that the peer answers reset the probe count here, so
// such a peer is not declared lost. What this cannot see: a middlebox that
// keeps answering for a peer that is gone (a proxy that stops forwarding);
// the op's timeout still bounds that.

// peerControl is what the liveness side keeps per link.
type peerControl struct {
	// name describes the peer in errors: "rank 3 (host h3 at 10.0.0.4:41000)".
	name atomic.Pointer[string]
	// cause, once set, is why the link was ended from outside the receive
	// side (the peer went silent); lostErr reports it instead of the
	// closed socket's error.
	cause atomic.Pointer[error]
	// suspect counts consecutive ticks on which the peer looked lost.
	suspect int
}

// who names the link's peer for errors.
func (l *Link) who() string {
	if n := l.ctl.name.Load(); n != nil {
		return *n
	}
	return fmt.Sprintf("rank %d", l.peer)
}

// PeerName returns "rank R (host H at ADDR)" for errors about a peer; host
// and addr may be empty.
func PeerName(rank int, host, addr string) string {
	switch {
	case host != "" && addr != "":
		return fmt.Sprintf("rank %d (host %s at %s)", rank, host, addr)
	case host != "":
		return fmt.Sprintf("rank %d (host %s)", rank, host)
	case addr != "":
		return fmt.Sprintf("rank %d (at %s)", rank, addr)
	}
	return fmt.Sprintf("rank %d", rank)
}

// Watch names the peer in the link's errors (PeerName) and, when timeout is
// above zero, declares the peer lost once its host has been silent for
// timeout while this end waited for an answer. It returns at once; the
// watch ends with the link.
func (l *Link) Watch(name string, timeout time.Duration) {
	if name != "" {
		l.ctl.name.Store(&name)
	}
	if timeout <= 0 {
		return
	}
	if err := keepAlive(l.conn, timeout); err != nil {
		// Without keepalive an idle link learns of a dead host only at the
		// op's deadline; busy links are still watched.
		_ = err
	}
	tick := min(max(timeout/10, 50*time.Millisecond), time.Second)
	go func() {
		t := time.NewTicker(tick)
		defer t.Stop()
		for {
			select {
			case <-l.done:
				return
			case <-t.C:
				if err := l.checkAlive(timeout); err != nil {
					l.declareLost(err)
					return
				}
			}
		}
	}()
}

// keepAlive makes the kernel probe an idle connection: first after a fifth
// of timeout (keepalive counts whole seconds, so at least 1 s), then every
// second, so an idle link's silence is measured too. The probe count is
// high: the watch, not the kernel, decides when the peer is lost.
func keepAlive(c *net.TCPConn, timeout time.Duration) error {
	idle := max(timeout/5, time.Second).Round(time.Second)
	return c.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: idle, Interval: time.Second, Count: 120})
}

// checkAlive returns an error when the peer looked lost on two ticks in a
// row (one tick could fall between a probe and its answer).
func (l *Link) checkAlive(timeout time.Duration) error {
	st, err := tcpState(l.conn)
	if err != nil {
		return nil // closing: the receive side reports it
	}
	if !st.lost(timeout) {
		l.ctl.suspect = 0
		return nil
	}
	l.ctl.suspect++
	if l.ctl.suspect < 2 {
		return nil
	}
	return fmt.Errorf("%w: %s has not answered for %.1fs (GOHCCL_PEER_TIMEOUT %gs): its host is down or unreachable",
		transport.ErrPeerLost, l.who(), float64(st.silent())/1e3, timeout.Seconds())
}

// declareLost ends the link with err: the receive side wakes on the closed
// socket and reports err (lostErr) to the matcher or the OnLost hook, and a
// send blocked on the socket fails with it too.
func (l *Link) declareLost(err error) {
	l.ctl.cause.CompareAndSwap(nil, &err)
	l.conn.Close()
	for _, c := range l.st.conns {
		c.Close() // stripe writers and readers blocked on the same dead host
	}
}

// tcpInfo is the part of Linux's struct tcp_info the watch reads.
type tcpInfo struct {
	retransmits  uint8  // retransmissions of the oldest unacknowledged segment
	probes       uint8  // unanswered zero-window or keepalive probes
	unacked      uint32 // segments sent and not acknowledged
	lastDataRecv uint32 // ms since data last arrived
	lastAckRecv  uint32 // ms since an ACK last arrived
}

// silent is how long (ms) the peer's kernel has said nothing.
func (t tcpInfo) silent() uint32 { return min(t.lastDataRecv, t.lastAckRecv) }

// lost: silent past timeout while waiting for an answer. A live peer answers
// a retransmission or a probe within a round trip, which resets both counts.
func (t tcpInfo) lost(timeout time.Duration) bool {
	waiting := t.retransmits > 0 || t.probes > 0
	return waiting && time.Duration(t.silent())*time.Millisecond >= timeout
}

// Offsets in struct tcp_info (include/uapi/linux/tcp.h), fixed since 2.6.
const (
	tcpiRetransmits  = 2
	tcpiProbes       = 3
	tcpiUnacked      = 24
	tcpiLastDataRecv = 52
	tcpiLastAckRecv  = 56
	tcpiRead         = 104 // enough for the fields above; the kernel copies at most what it has
)

func tcpState(c *net.TCPConn) (tcpInfo, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return tcpInfo{}, err
	}
	var buf [tcpiRead]byte
	var serr error
	err = raw.Control(func(fd uintptr) {
		n := uint32(len(buf))
		_, _, e := syscall.Syscall6(syscall.SYS_GETSOCKOPT, fd, syscall.IPPROTO_TCP, syscall.TCP_INFO,
			uintptr(unsafe.Pointer(&buf[0])), uintptr(unsafe.Pointer(&n)), 0)
		if e != 0 {
			serr = e
		} else if n < tcpiLastAckRecv+4 {
			serr = fmt.Errorf("tcp_info of %d bytes", n)
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return tcpInfo{}, err
	}
	le := func(o int) uint32 { return *(*uint32)(unsafe.Pointer(&buf[o])) }
	return tcpInfo{retransmits: buf[tcpiRetransmits], probes: buf[tcpiProbes], unacked: le(tcpiUnacked),
		lastDataRecv: le(tcpiLastDataRecv), lastAckRecv: le(tcpiLastAckRecv)}, nil
}
