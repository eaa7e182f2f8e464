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
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gohccl/gohccl/goimpl/transport"
)

// Identity is what both ends of a connection must share.
type Identity struct {
	CommID [16]byte
	Token  [16]byte
	Size   int
}

// Handshake layout: the connecting rank sends helloSize bytes, the accepting
// rank answers with ackSize bytes.
const (
	helloSize = 64
	ackSize   = 16
	// handshakeTimeout bounds how long a connection may take to present its
	// handshake, so a silent stray connection cannot hold a slot.
	handshakeTimeout = 5 * time.Second
	protoVersion     = 1
)

var helloMagic = [8]byte{'g', 'o', 'h', 'c', 'c', 'l', 'H', 'I'}
var ackMagic = [8]byte{'g', 'o', 'h', 'c', 'c', 'l', 'O', 'K'}

// hello is the connecting side's handshake.
type hello struct {
	Version  uint32
	From, To uint32
	Size     uint32
	CommID   [16]byte
	Token    [16]byte
	// Stripe is this connection's index among the Stripes connections the
	// connecting rank opens to the accepting one (stripe.go). A peer that
	// predates striping sends 0 and 0: one connection.
	Stripe, Stripes uint8
}

func (h *hello) encode(b []byte) {
	copy(b[0:8], helloMagic[:])
	binary.LittleEndian.PutUint32(b[8:], h.Version)
	binary.LittleEndian.PutUint32(b[12:], h.From)
	binary.LittleEndian.PutUint32(b[16:], h.To)
	binary.LittleEndian.PutUint32(b[20:], h.Size)
	copy(b[24:40], h.CommID[:])
	copy(b[40:56], h.Token[:])
	clear(b[56:64])
	if h.Stripes > 1 {
		b[56], b[57] = h.Stripe, h.Stripes
	}
}

// decodeHello parses a handshake without trusting any of it.
func decodeHello(b []byte) (hello, error) {
	var h hello
	if len(b) != helloSize {
		return h, fmt.Errorf("handshake of %d bytes, want %d", len(b), helloSize)
	}
	if [8]byte(b[0:8]) != helloMagic {
		return h, errors.New("handshake has bad magic (not a gohccl peer)")
	}
	h.Version = binary.LittleEndian.Uint32(b[8:])
	h.From = binary.LittleEndian.Uint32(b[12:])
	h.To = binary.LittleEndian.Uint32(b[16:])
	h.Size = binary.LittleEndian.Uint32(b[20:])
	copy(h.CommID[:], b[24:40])
	copy(h.Token[:], b[40:56])
	if h.Version != protoVersion {
		return h, fmt.Errorf("handshake speaks protocol version %d, this library %d", h.Version, protoVersion)
	}
	for _, c := range b[58:64] {
		if c != 0 {
			return h, errors.New("handshake has reserved bytes set")
		}
	}
	h.Stripe, h.Stripes = b[56], max(b[57], 1)
	if h.Stripes > MaxStripes || h.Stripe >= h.Stripes {
		return h, fmt.Errorf("handshake names stripe %d of %d (at most %d)", h.Stripe, h.Stripes, MaxStripes)
	}
	return h, nil
}

// verify checks a decoded handshake against this rank's identity.
func (h *hello) verify(id *Identity, rank int) error {
	if h.CommID != id.CommID {
		return errors.New("handshake is for another communicator")
	}
	if subtle.ConstantTimeCompare(h.Token[:], id.Token[:]) != 1 {
		return errors.New("handshake carries a wrong token")
	}
	if int(h.Size) != id.Size || int(h.To) != rank {
		return fmt.Errorf("handshake is for rank %d of %d, this is rank %d of %d", h.To, h.Size, rank, id.Size)
	}
	if int(h.From) <= rank || int(h.From) >= id.Size {
		return fmt.Errorf("handshake from rank %d, which does not connect to rank %d", h.From, rank)
	}
	return nil
}

// Listener accepts the connections of higher ranks during bootstrap.
type Listener struct {
	ln *net.TCPListener
}

// Listen opens a listening socket on ip (any free port). ip must be an
// address, not a name: anything else would silently bind every interface.
// Only "0.0.0.0" or "::" (asked for explicitly) listens on all of them.
func Listen(ip string) (*Listener, error) {
	addr := net.ParseIP(ip)
	if addr == nil {
		return nil, fmt.Errorf("listening on %q: not an IP address", ip)
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: addr})
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", ip, err)
	}
	return &Listener{ln: ln}, nil
}

// Addr returns host:port for peers to dial.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Close stops listening.
func (l *Listener) Close() error { return l.ln.Close() }

// Logf receives warnings about rejected connections.
type Logf func(format string, args ...any)

// AcceptPeers accepts one verified connection from each rank in peers
// (ranks above rank) until deadline. A connection that fails its handshake
// is logged and dropped; it never fails the bootstrap.
func (l *Listener) AcceptPeers(id *Identity, rank int, peers []int, deadline time.Time, warn Logf) (map[int]*net.TCPConn, error) {
	got, err := l.AcceptStriped(id, rank, peers, deadline, warn)
	if err != nil {
		return nil, err
	}
	one := make(map[int]*net.TCPConn, len(got))
	for p, cs := range got {
		one[p] = cs[0]
		for _, c := range cs[1:] {
			c.Close()
		}
	}
	return one, nil
}

// AcceptStriped accepts every connection each rank in peers (ranks above
// rank) opens: as many as its handshakes say (DialStripes), in stripe order.
func (l *Listener) AcceptStriped(id *Identity, rank int, peers []int, deadline time.Time, warn Logf) (map[int][]*net.TCPConn, error) {
	want := make(map[int]bool, len(peers))
	for _, p := range peers {
		want[p] = true
	}
	got := make(map[int][]*net.TCPConn, len(peers))
	have := make(map[int]int, len(peers)) // stripes in got[p]
	complete := 0
	type result struct {
		from            int
		stripe, stripes int
		conn            *net.TCPConn
	}
	results := make(chan result)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var pmu sync.Mutex
	pending := map[*net.TCPConn]bool{} // connections still in their handshake
	defer func() {
		close(stop)
		l.ln.SetDeadline(time.Now()) // unblock the accept loop
		pmu.Lock()
		for c := range pending {
			c.Close() // a silent connection must not hold up the bootstrap
		}
		pmu.Unlock()
		wg.Wait()
		l.ln.SetDeadline(time.Time{})
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.ln.AcceptTCP()
			if err != nil {
				select {
				case <-stop:
					return
				default:
				}
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					return
				}
				if errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(10 * time.Millisecond)
				continue
			}
			pmu.Lock()
			pending[c] = true
			pmu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				h, err := serverHandshake(c, id, rank, deadline)
				pmu.Lock()
				delete(pending, c)
				pmu.Unlock()
				if err != nil {
					warn("dropped a connection from %s: %v", c.RemoteAddr(), err)
					c.Close()
					return
				}
				select {
				case results <- result{int(h.From), int(h.Stripe), int(h.Stripes), c}:
				case <-stop:
					c.Close()
				}
			}()
		}
	}()
	l.ln.SetDeadline(deadline)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for complete < len(want) {
		select {
		case r := <-results:
			cs := got[r.from]
			if cs == nil && want[r.from] {
				cs = make([]*net.TCPConn, r.stripes)
				got[r.from] = cs
			}
			if cs == nil || len(cs) != r.stripes || cs[r.stripe] != nil {
				warn("dropped a second connection claiming to be rank %d (stripe %d of %d)", r.from, r.stripe, r.stripes)
				r.conn.Close()
				continue
			}
			cs[r.stripe] = r.conn
			if have[r.from]++; have[r.from] == len(cs) {
				complete++
			}
		case <-timer.C:
			var missing []int
			for _, p := range peers {
				if got[p] == nil || have[p] < len(got[p]) {
					missing = append(missing, p)
				}
				for _, c := range got[p] {
					if c != nil {
						c.Close()
					}
				}
			}
			return nil, fmt.Errorf("%w: rank %d accepted no connection from ranks %v", transport.ErrTimeout, rank, missing)
		}
	}
	return got, nil
}

func serverHandshake(c *net.TCPConn, id *Identity, rank int, deadline time.Time) (hello, error) {
	d := time.Now().Add(handshakeTimeout)
	if deadline.Before(d) {
		d = deadline
	}
	c.SetDeadline(d)
	var b [helloSize]byte
	if _, err := io.ReadFull(c, b[:]); err != nil {
		return hello{}, fmt.Errorf("reading handshake: %w", err)
	}
	h, err := decodeHello(b[:])
	if err == nil {
		err = h.verify(id, rank)
	}
	if err != nil {
		return hello{}, err
	}
	var a [ackSize]byte
	copy(a[:8], ackMagic[:])
	binary.LittleEndian.PutUint32(a[12:], uint32(rank))
	if _, err := c.Write(a[:]); err != nil {
		return hello{}, fmt.Errorf("answering handshake of rank %d: %w", h.From, err)
	}
	c.SetDeadline(time.Time{})
	return h, nil
}

// Dial connects rank from to rank to at addr and performs the handshake,
// retrying refused connections until deadline.
func Dial(addr string, id *Identity, from, to int, deadline time.Time) (*net.TCPConn, error) {
	return dialStripe(addr, id, from, to, 0, 1, deadline)
}

func dialStripe(addr string, id *Identity, from, to, stripe, stripes int, deadline time.Time) (*net.TCPConn, error) {
	backoff := 5 * time.Millisecond
	for {
		c, err := dialOnce(addr, id, from, to, stripe, stripes, deadline)
		if err == nil {
			return c, nil
		}
		if time.Now().Add(backoff).After(deadline) {
			return nil, fmt.Errorf("%w: rank %d could not connect to rank %d at %s: %v", transport.ErrTimeout, from, to, addr, err)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, os.ErrDeadlineExceeded) && !errors.Is(err, syscall.ECONNRESET) {
			return nil, fmt.Errorf("rank %d connecting to rank %d at %s: %w", from, to, addr, err)
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

func dialOnce(addr string, id *Identity, from, to, stripe, stripes int, deadline time.Time) (*net.TCPConn, error) {
	d := net.Dialer{Deadline: deadline}
	nc, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	c := nc.(*net.TCPConn)
	c.SetDeadline(deadline)
	var b [helloSize]byte
	h := hello{Version: protoVersion, From: uint32(from), To: uint32(to), Size: uint32(id.Size), CommID: id.CommID, Token: id.Token,
		Stripe: uint8(stripe), Stripes: uint8(stripes)}
	h.encode(b[:])
	if _, err := c.Write(b[:]); err != nil {
		c.Close()
		return nil, err
	}
	var a [ackSize]byte
	if _, err := io.ReadFull(c, a[:]); err != nil {
		c.Close()
		return nil, fmt.Errorf("rank %d refused the handshake (%v): is it the same job and communicator?", to, err)
	}
	if [8]byte(a[:8]) != ackMagic || int(binary.LittleEndian.Uint32(a[12:])) != to {
		c.Close()
		return nil, fmt.Errorf("peer at %s answered the handshake as something other than rank %d", addr, to)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

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
			err = fmt.Errorf("%w: rank %d: %v", transport.ErrPeerLost, l.peer, err)
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
	if l.closed.Load() {
		return fmt.Errorf("%w: the link to rank %d was closed", transport.ErrClosed, l.peer)
	}
	if errors.Is(err, transport.ErrProtocol) {
		return fmt.Errorf("rank %d sent a corrupt frame: %w", l.peer, err)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: rank %d closed the connection (did it exit or fail?)", transport.ErrPeerLost, l.peer)
	}
	return fmt.Errorf("%w: rank %d: %v", transport.ErrPeerLost, l.peer, err)
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
