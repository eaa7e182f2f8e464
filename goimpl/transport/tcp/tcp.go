// Package tcp carries frames over TCP: one connection per pair of ranks in a
// communicator, opened by the higher rank, and a handshake that proves both
// ends belong to the same communicator before any frame is accepted.
//
// Each link sends on the caller's goroutine (one writev per frame, under the
// link's lock) and receives on a goroutine of its own that reads headers and
// reads payloads straight into posted receive buffers, or stashes them when
// the receive is not posted yet, up to the matcher's early-frame limit per
// peer (GOHCCL_EARLY_BYTES). Past it the goroutine stops reading until the
// receive is posted, and TCP's own window holds the sender back: a peer
// cannot grow this rank's memory without bound (docs/protocol.md, "Flow").
package tcp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gohccl/gohccl/goimpl/transport"
)

// smallFrame is the largest payload copied beside its header into one write;
// larger ones go out with writev straight from the caller's memory.
const smallFrame = 16 << 10

// readBuffer sizes the receive side's buffered reader: large enough that a
// small frame's header and payload arrive in one read, small enough that
// large payloads bypass it and land in the posted buffer directly.
const readBuffer = 64 << 10

// Link is a TCP connection to one peer.
type Link struct {
	peer    int
	conn    *net.TCPConn
	matcher *transport.Matcher
	closed  atomic.Bool
	done    chan struct{}
	// onLost, when set, is told of the connection's end instead of the
	// matcher (OnLost).
	onLost atomic.Pointer[func(error)]
	// ctl names the peer and watches that it is alive (liveness.go).
	ctl peerControl

	wmu sync.Mutex
	// wfailed is set after a write that sent part of a frame: the stream may
	// end inside it, so nothing more (not even an abort frame) may follow.
	wfailed error
	wbuf    []byte
	iov     net.Buffers
	iovArr  [2][]byte // backs iov: WriteTo consumes its slice, reslicing the array allocates nothing

	// st holds the extra connections of a striped link (stripe.go).
	st stripeSet
}

// NewLink wraps an established connection to peer and starts its receive
// side, which delivers into m.
func NewLink(conn *net.TCPConn, peer int, m *transport.Matcher) *Link {
	l := newLink(conn, peer, m)
	go l.receive()
	return l
}

func newLink(conn *net.TCPConn, peer int, m *transport.Matcher) *Link {
	conn.SetNoDelay(true)
	return &Link{peer: peer, conn: conn, matcher: m, done: make(chan struct{}),
		wbuf: make([]byte, transport.HeaderSize+smallFrame)}
}

// Class implements transport.Link.
func (l *Link) Class() string { return "tcp" }

// Send implements transport.Link.
func (l *Link) Send(h *transport.Header, payload []byte, deadline time.Time) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.closed.Load() {
		return fmt.Errorf("%w: the link to rank %d is closed", transport.ErrClosed, l.peer)
	}
	if l.wfailed != nil {
		return l.wfailed
	}
	l.conn.SetWriteDeadline(deadline)
	h.Encode(l.wbuf)
	k, first, base := l.st.split(len(payload))
	if k > 1 {
		// Parts 1..k-1 go out on the other stripes while this goroutine
		// writes the header and part 0.
		l.st.sendParts(payload, k, first, base, deadline)
		payload = payload[:first]
	}
	var err error
	var sent int64
	if len(payload) <= smallFrame {
		n := copy(l.wbuf[transport.HeaderSize:], payload)
		var k int
		k, err = l.conn.Write(l.wbuf[:transport.HeaderSize+n])
		sent = int64(k)
	} else {
		l.iovArr = [2][]byte{l.wbuf[:transport.HeaderSize], payload}
		l.iov = l.iovArr[:]
		sent, err = l.iov.WriteTo(l.conn)
	}
	if k > 1 {
		if serr := l.st.waitSent(k); serr != nil {
			sent = 1 // some stripe may have stopped inside its part
			if err == nil {
				err = serr
			}
		}
	}
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("%w: rank %d did not take the data in time (it stopped reading: stalled, or it holds GOHCCL_EARLY_BYTES of this rank's frames whose receives it has not posted)", transport.ErrTimeout, l.peer)
		} else {
			err = l.lostErr(err)
		}
		if sent > 0 {
			l.wfailed = fmt.Errorf("%w (an earlier send to rank %d stopped inside a frame: %v)", transport.ErrClosed, l.peer, err)
		}
		return err
	}
	return nil
}

// Close implements transport.Link; it waits for the receive side to stop.
func (l *Link) Close() error {
	if l.closed.Swap(true) {
		<-l.done
		return nil
	}
	err := l.conn.Close()
	l.st.closeConns()
	l.matcher.Wake() // a receive side holding back an early frame returns
	<-l.done
	l.wmu.Lock()
	l.st.stopWriters()
	l.wmu.Unlock()
	return err
}

func (l *Link) receive() {
	defer close(l.done)
	defer l.st.stopReaders()
	br := bufio.NewReaderSize(l.conn, readBuffer)
	var hb [transport.HeaderSize]byte
	var h transport.Header
	for {
		if _, err := io.ReadFull(br, hb[:]); err != nil {
			l.lost(err)
			return
		}
		if err := h.Decode(hb[:]); err != nil {
			l.lost(fmt.Errorf("%w: %v", transport.ErrProtocol, err))
			return
		}
		dst, r, discard := l.matcher.ArriveBounded(l.peer, &h, l.closed.Load)
		switch {
		case r != nil:
			err := l.readPayload(br, dst)
			if err != nil {
				l.matcher.Complete(r, l.lostErr(err))
				l.lost(err)
				return
			}
			l.matcher.Complete(r, nil)
		case discard:
			if err := l.discardPayload(br, int(h.Len)); err != nil {
				l.lost(err)
				return
			}
		default:
			buf := l.matcher.StashBuffer(int(h.Len))
			if err := l.readPayload(br, buf); err != nil {
				l.lost(err)
				return
			}
			l.matcher.Stash(l.peer, &h, buf)
		}
	}
}

func (l *Link) lostErr(err error) error {
	if c := l.ctl.cause.Load(); c != nil {
		return *c
	}
	if l.closed.Load() {
		return fmt.Errorf("%w: the link to rank %d was closed", transport.ErrClosed, l.peer)
	}
	if errors.Is(err, transport.ErrProtocol) {
		return fmt.Errorf("%s sent a corrupt frame: %w", l.who(), err)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: %s closed the connection (did it exit or fail?)", transport.ErrPeerLost, l.who())
	}
	return fmt.Errorf("%w: %s: %v", transport.ErrPeerLost, l.who(), err)
}

// lost records the end of the connection; the socket is closed too, so the
// peer learns of it at once instead of at its timeout.
func (l *Link) lost(err error) {
	if f := l.onLost.Load(); f != nil {
		(*f)(l.lostErr(err))
	} else {
		l.matcher.Fail(l.peer, l.lostErr(err))
	}
	l.conn.Close()
	l.st.closeConns()
}

// OnLost hands the end of the connection to f rather than failing the
// peer's receives in the matcher: for a connection kept only to learn that
// the peer's process ended while the frames travel another way (over
// shared memory), which must deliver what it already carries first.
func (l *Link) OnLost(f func(error)) { l.onLost.Store(&f) }
