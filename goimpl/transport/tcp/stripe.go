package tcp

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gohccl/gohccl/goimpl/transport"
)

// Striping: a link may hold several connections to its peer (stripes), so
// that one large frame travels over all of them at once where one stream
// cannot fill the link (a stream bounded by one core's protocol work, by its
// window over a long round trip, or by a per-flow limit on the path).
//
// Stripe 0 carries every header and every small frame, exactly as a link of
// one connection does. A frame of at least 2*stripeMinPart bytes is cut into
// k parts (split): part 0 follows its header on stripe 0, part i travels alone
// on stripe i, with no header of its own: both ends cut a frame the same way
// from its length and the number of stripes, and each stripe is a byte
// stream in frame order, so the receiver knows which bytes come next on
// every stripe. The sender writes the parts concurrently, one goroutine per
// extra stripe, straight from the caller's memory; the receiver reads them
// concurrently straight into the frame's destination (the posted receive's
// buffer, or the early-frame buffer): no copy beyond the socket's own, and
// no allocation per frame (jobs travel by value over buffered channels).

// MaxStripes bounds the connections per peer (GOHCCL_NSOCKS).
const MaxStripes = 8

// stripeMinPart is the smallest part a frame is cut into: handing a part to
// another goroutine costs a few microseconds, which 64 KiB at 10 Gbit/s
// (52 us) amortizes.
const stripeMinPart = 64 << 10

// stripeSet is a link's extra connections (stripes 1..k-1) and the
// goroutines that write and read them.
type stripeSet struct {
	conns []*net.TCPConn
	// wjobs[i] feeds the writer of conns[i]; wdone gets one result per job.
	// Only Send (under the link's write lock) sends jobs; Close closes the
	// channels under that lock.
	wjobs []chan stripeJob
	wdone chan error
	// rjobs[i] feeds the reader of conns[i]; rdone gets one result per job.
	// Only the link's receive goroutine sends jobs, and closes the channels
	// when it ends.
	rjobs []chan stripeJob
	rdone chan error
}

// stripeJob is one part: bytes to write or read, or (buf nil) skip bytes to
// read and drop.
type stripeJob struct {
	buf      []byte
	skip     int
	deadline time.Time
}

// split cuts an n-byte frame: k parts (1: not striped), part 0 of first
// bytes, parts 1..k-1 of base bytes each.
func (s *stripeSet) split(n int) (k, first, base int) {
	if len(s.conns) == 0 || n < 2*stripeMinPart {
		return 1, n, 0
	}
	k = min(1+len(s.conns), n/stripeMinPart)
	base = (n / k) &^ 63
	return k, n - base*(k-1), base
}

// part returns part i (1..k-1) of b, cut by split.
func part(b []byte, i, first, base int) []byte {
	lo := first + (i-1)*base
	return b[lo : lo+base]
}

// start launches the writers and readers of the extra stripes.
func (s *stripeSet) start(conns []*net.TCPConn) {
	s.conns = conns
	s.wjobs = make([]chan stripeJob, len(conns))
	s.rjobs = make([]chan stripeJob, len(conns))
	s.wdone = make(chan error, len(conns))
	s.rdone = make(chan error, len(conns))
	for i, c := range conns {
		c.SetNoDelay(true)
		s.wjobs[i] = make(chan stripeJob, 1)
		s.rjobs[i] = make(chan stripeJob, 1)
		go writeStripe(c, s.wjobs[i], s.wdone)
		go readStripe(c, s.rjobs[i], s.rdone)
	}
}

func writeStripe(c *net.TCPConn, jobs <-chan stripeJob, done chan<- error) {
	for j := range jobs {
		c.SetWriteDeadline(j.deadline)
		_, err := c.Write(j.buf)
		done <- err
	}
}

func readStripe(c *net.TCPConn, jobs <-chan stripeJob, done chan<- error) {
	var scratch []byte
	for j := range jobs {
		var err error
		if j.buf != nil {
			_, err = io.ReadFull(c, j.buf)
		} else {
			if scratch == nil {
				scratch = make([]byte, 32<<10)
			}
			for left := j.skip; left > 0 && err == nil; {
				var n int
				n, err = io.ReadFull(c, scratch[:min(left, len(scratch))])
				left -= n
			}
		}
		done <- err
	}
}

// closeConns closes the extra stripes' connections, which ends any read or
// write in progress on them.
func (s *stripeSet) closeConns() {
	for _, c := range s.conns {
		c.Close()
	}
}

// stopWriters ends the writer goroutines; the caller holds the link's
// write lock, so no Send is between dispatching parts and collecting them.
func (s *stripeSet) stopWriters() {
	for i, ch := range s.wjobs {
		close(ch)
		s.wjobs[i] = nil
	}
	s.wjobs = s.wjobs[:0]
}

// stopReaders ends the reader goroutines; called by the receive goroutine
// as it ends, when no part is outstanding.
func (s *stripeSet) stopReaders() {
	for _, ch := range s.rjobs {
		close(ch)
	}
}

// sendParts hands parts 1..k-1 of payload to the stripes' writers.
func (s *stripeSet) sendParts(payload []byte, k, first, base int, deadline time.Time) {
	for i := 1; i < k; i++ {
		s.wjobs[i-1] <- stripeJob{buf: part(payload, i, first, base), deadline: deadline}
	}
}

// waitSent collects the results of k-1 parts handed out by sendParts: the
// first error, after every writer has finished with the caller's memory.
func (s *stripeSet) waitSent(k int) error {
	var first error
	for i := 1; i < k; i++ {
		if err := <-s.wdone; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// readPayload reads a frame's payload of len(dst) bytes from stripe 0 (br)
// and the extra stripes into dst. It returns only once no stripe will write
// into dst any more.
func (l *Link) readPayload(br io.Reader, dst []byte) error {
	s := &l.st
	k, first, base := s.split(len(dst))
	for i := 1; i < k; i++ {
		s.rjobs[i-1] <- stripeJob{buf: part(dst, i, first, base)}
	}
	_, err := io.ReadFull(br, dst[:first])
	return l.collectParts(k, err)
}

// discardPayload reads and drops an n-byte payload from every stripe it
// travels on.
func (l *Link) discardPayload(br interface{ Discard(int) (int, error) }, n int) error {
	s := &l.st
	k, first, base := s.split(n)
	for i := 1; i < k; i++ {
		s.rjobs[i-1] <- stripeJob{skip: base}
	}
	_, err := br.Discard(first)
	return l.collectParts(k, err)
}

// collectParts waits for the k-1 parts handed to the readers. If stripe 0
// failed (err), the other stripes are closed first, so that none waits for
// bytes that will not come; if a stripe failed, stripe 0's error wins, else
// the stripe's.
func (l *Link) collectParts(k int, err error) error {
	if k == 1 {
		return err
	}
	if err != nil {
		l.st.closeConns()
	}
	for i := 1; i < k; i++ {
		if e := <-l.st.rdone; e != nil && err == nil {
			err = fmt.Errorf("stripe connection: %w", e)
			l.st.closeConns()
		}
	}
	return err
}

// DialStripes opens stripes connections from rank from to rank to at addr,
// each with its own handshake naming its stripe, stripe 0 first, retrying
// refused connections until deadline: DialPeerStripes without its context
// and dial window, as Dial is DialPeer.
func DialStripes(addr string, id *Identity, from, to, stripes int, deadline time.Time) ([]*net.TCPConn, error) {
	return DialPeerStripes(context.Background(), addr, id, from, to, stripes, deadline, 0)
}

// NewStripedLink wraps the connections to peer that DialStripes or
// AcceptStriped returned (conns[0] carries the headers) and starts the
// link's receive side.
func NewStripedLink(conns []*net.TCPConn, peer int, m *transport.Matcher) *Link {
	l := newLink(conns[0], peer, m)
	if len(conns) > 1 {
		l.st.start(conns[1:])
	}
	go l.receive()
	return l
}

// Stripes returns the number of connections the link uses.
func (l *Link) Stripes() int { return 1 + len(l.st.conns) }

// AutoStripes is the default number of connections per remote peer for a
// rank that shares cores with localRanks-1 others on its host. Each
// connection's kernel copies run at up to one core's speed, on both ends,
// and a rank sends and receives at once (rings do), so half the cores a
// rank can have go to its receiving stripes; more stripes than that only
// queue behind each other. The cap of 4 keeps the connection count modest
// where cores abound: beyond a few streams, per-flow limits are met.
func AutoStripes(cores, localRanks int) int {
	return min(max(cores/max(localRanks, 1)/2, 1), 4)
}
