// Package tcp carries frames over TCP: one connection per pair of ranks in a
// communicator, opened by the higher rank, and a handshake that proves both
// ends belong to the same communicator before any frame is accepted.
//
// Each link sends on the caller's goroutine (one writev per frame, under the
// link's lock) and receives on a goroutine of its own that reads headers and
// reads payloads straight into posted receive buffers, or stashes them when
// the receive is not posted yet. Because that goroutine always drains the
// socket, a send never waits for the peer's program to reach its receive,
// and a ring of ranks that all send before they receive cannot deadlock.
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
}

// NewLink wraps an established connection to peer and starts its receive
// side, which delivers into m.
func NewLink(conn *net.TCPConn, peer int, m *transport.Matcher) *Link {
	conn.SetNoDelay(true)
	l := &Link{peer: peer, conn: conn, matcher: m, done: make(chan struct{}),
		wbuf: make([]byte, transport.HeaderSize+smallFrame)}
	go l.receive()
	return l
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
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			err = fmt.Errorf("%w: rank %d did not take the data in time", transport.ErrTimeout, l.peer)
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
	<-l.done
	return err
}

func (l *Link) receive() {
	defer close(l.done)
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
		dst, r, discard := l.matcher.Arrive(l.peer, &h)
		switch {
		case r != nil:
			_, err := io.ReadFull(br, dst)
			if err != nil {
				l.matcher.Complete(r, l.lostErr(err))
				l.lost(err)
				return
			}
			l.matcher.Complete(r, nil)
		case discard:
			if _, err := br.Discard(int(h.Len)); err != nil {
				l.lost(err)
				return
			}
		default:
			buf := l.matcher.StashBuffer(int(h.Len))
			if _, err := io.ReadFull(br, buf); err != nil {
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
}

// OnLost hands the end of the connection to f rather than failing the
// peer's receives in the matcher: for a connection kept only to learn that
// the peer's process ended while the frames travel another way (over
// shared memory), which must deliver what it already carries first.
func (l *Link) OnLost(f func(error)) { l.onLost.Store(&f) }
