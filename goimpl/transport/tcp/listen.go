package tcp

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/gohccl/gohccl/goimpl/transport"
)

// Listener accepts the connections of higher ranks during bootstrap.
type Listener struct {
	ln *net.TCPListener
}

// Listen opens a listening socket on ip (any free port). ip must be an
// address, not a name: anything else would silently bind every interface.
// Only "0.0.0.0" or "::" (asked for explicitly) listens on all of them.
func Listen(ip string) (*Listener, error) { return ListenRange(ip, 0, 0) }

// ListenRange is Listen on a port in [lo, hi] (both 0: any port). It tries
// the range from a random port on, so ranks of one host starting together
// rarely race for the same one, and fails naming the range when every port
// in it is taken.
func ListenRange(ip string, lo, hi int) (*Listener, error) {
	addr := net.ParseIP(ip)
	if addr == nil {
		return nil, fmt.Errorf("listening on %q: not an IP address", ip)
	}
	if lo == 0 && hi == 0 {
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: addr})
		if err != nil {
			return nil, fmt.Errorf("listening on %s: %w", ip, err)
		}
		return &Listener{ln: ln}, nil
	}
	if lo < 1 || hi > 65535 || lo > hi {
		return nil, fmt.Errorf("listening on %s: %d-%d is not a port range", ip, lo, hi)
	}
	n := hi - lo + 1
	first := rand.IntN(n)
	for i := range n {
		port := lo + (first+i)%n
		ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: addr, Port: port})
		if err == nil {
			return &Listener{ln: ln}, nil
		}
		if !errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("listening on %s:%d: %w", ip, port, err)
		}
	}
	return nil, fmt.Errorf("listening on %s: every port in %d-%d is in use (%d tried)", ip, lo, hi, n)
}

// Addr returns host:port for peers to dial.
func (l *Listener) Addr() string { return l.ln.Addr().String() }

// Close stops listening.
func (l *Listener) Close() error { return l.ln.Close() }

// Logf receives warnings about rejected connections.
type Logf func(format string, args ...any)

// AcceptPeers accepts one verified connection from each rank in peers
// (ranks above rank) until deadline; see Accept.
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

// AcceptStriped is Accept that only its deadline stops.
func (l *Listener) AcceptStriped(id *Identity, rank int, peers []int, deadline time.Time, warn Logf) (map[int][]*net.TCPConn, error) {
	return l.Accept(context.Background(), id, rank, peers, deadline, warn)
}

// Accept accepts every connection each rank in peers (ranks above rank)
// opens, as many as its handshakes say (DialStripes), in stripe order, until
// deadline, or until ctx ends (then its cause is the error). A connection
// that fails its handshake is logged and dropped; it never fails the
// bootstrap. What a connection can make this rank hold before its handshake
// completes is bounded: handshake messages of fixed size, read within
// handshakeTimeout, and at most maxPending such connections at once (more
// are closed at once).
func (l *Listener) Accept(ctx context.Context, id *Identity, rank int, peers []int, deadline time.Time, warn Logf) (map[int][]*net.TCPConn, error) {
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
	maxPending := 4*len(peers)*MaxStripes + 8
	warnedFull := false
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
			full := len(pending) >= maxPending
			if !full {
				pending[c] = true
			}
			pmu.Unlock()
			if full {
				if !warnedFull {
					warnedFull = true
					warn("%d connections are in their handshake already; closing more (from %s first)", maxPending, c.RemoteAddr())
				}
				c.Close()
				continue
			}
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
	closeGot := func() {
		for _, cs := range got {
			for _, c := range cs {
				if c != nil {
					c.Close()
				}
			}
		}
	}
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
		case <-ctx.Done():
			closeGot()
			return nil, context.Cause(ctx)
		case <-timer.C:
			closeGot()
			var missing []int
			for _, p := range peers {
				if got[p] == nil || have[p] < len(got[p]) {
					missing = append(missing, p)
				}
			}
			return nil, fmt.Errorf("%w: rank %d accepted no connection from ranks %v", transport.ErrTimeout, rank, missing)
		}
	}
	return got, nil
}

// Dial connects rank from to rank to at addr and performs the handshake,
// retrying refused connections until deadline.
func Dial(addr string, id *Identity, from, to int, deadline time.Time) (*net.TCPConn, error) {
	return DialPeer(context.Background(), addr, id, from, to, deadline, 0)
}

// DialPeerStripes is DialPeer for stripes connections (DialStripes), stripe
// 0 first.
func DialPeerStripes(ctx context.Context, addr string, id *Identity, from, to, stripes int, deadline time.Time, window time.Duration) ([]*net.TCPConn, error) {
	if stripes < 1 || stripes > MaxStripes {
		return nil, fmt.Errorf("%d connections per peer: want 1 to %d", stripes, MaxStripes)
	}
	conns := make([]*net.TCPConn, 0, stripes)
	for i := range stripes {
		c, err := dialPeer(ctx, addr, id, from, to, i, stripes, deadline, window)
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			if i > 0 {
				err = fmt.Errorf("connection %d of %d: %w", i+1, stripes, err)
			}
			return nil, err
		}
		conns = append(conns, c)
	}
	return conns, nil
}

// DialPeer connects rank from to rank to at addr, the address rank to
// published, and performs the handshake. The address was published after
// its listener opened, so a connection it refuses, resets or leaves
// unanswered means the peer is gone or the address is one this rank cannot
// reach: such attempts are retried for window (0: until deadline), not for
// the whole bootstrap. A peer that accepted the connection but has not
// reached its handshake yet is waited for until deadline (with keepalive,
// so a host that dies meanwhile ends the wait). ctx ends it early.
func DialPeer(ctx context.Context, addr string, id *Identity, from, to int, deadline time.Time, window time.Duration) (*net.TCPConn, error) {
	return dialPeer(ctx, addr, id, from, to, 0, 1, deadline, window)
}

func dialPeer(ctx context.Context, addr string, id *Identity, from, to, stripe, stripes int, deadline time.Time, window time.Duration) (*net.TCPConn, error) {
	giveUp := deadline
	if window > 0 && time.Now().Add(window).Before(deadline) {
		giveUp = time.Now().Add(window)
	}
	backoff := 5 * time.Millisecond
	for {
		c, reached, err := dialOnce(ctx, addr, id, from, to, stripe, stripes, giveUp, deadline, window)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		retry := errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, os.ErrDeadlineExceeded) ||
			errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EHOSTUNREACH) ||
			errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, errHandshakeEnded)
		if !retry {
			return nil, fmt.Errorf("rank %d connecting to rank %d at %s: %w", from, to, addr, err)
		}
		if time.Now().Add(backoff).After(giveUp) {
			if !reached && giveUp.Before(deadline) {
				return nil, fmt.Errorf("%w: rank %d could not reach rank %d at %s, the address it published, within %v: %v",
					transport.ErrPeerLost, from, to, addr, window, err)
			}
			return nil, fmt.Errorf("%w: rank %d could not connect to rank %d at %s: %v", transport.ErrTimeout, from, to, addr, err)
		}
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
		backoff = min(2*backoff, 250*time.Millisecond)
	}
}

// dialOnce makes one connection attempt (bounded by giveUp) and its
// handshake (bounded by deadline). reached says the TCP connection was made.
func dialOnce(ctx context.Context, addr string, id *Identity, from, to, stripe, stripes int, giveUp, deadline time.Time, window time.Duration) (c *net.TCPConn, reached bool, err error) {
	d := net.Dialer{Deadline: giveUp}
	nc, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, false, err
	}
	c = nc.(*net.TCPConn)
	if window > 0 {
		// An idle wait for the peer's answer: the kernel gives up on a
		// host that stops answering its probes after about window.
		c.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: time.Second, Interval: time.Second,
			Count: max(2, int(window/time.Second))})
	}
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Now()) })
	defer stop()
	c.SetDeadline(deadline)
	if err := clientHandshake(c, id, from, to, stripe, stripes, addr); err != nil {
		c.Close()
		return nil, true, err
	}
	c.SetDeadline(time.Time{})
	return c, true, nil
}

func isReset(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}
