package comm

import (
	"context"
	"crypto/ecdh"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/rendezvous"
	"github.com/gohccl/gohccl/goimpl/transport/tcp"
)

// listen opens this rank's listener on the address listenAddress picks, in
// GOHCCL_PORT_RANGE when set; nil for a group of one (which still checks
// GOHCCL_SOCKET_IFNAME).
func listen(cfg config.Config, master string, size int) (*tcp.Listener, error) {
	ip, err := listenAddress(cfg.SocketIfname, master)
	if err != nil || size == 1 {
		return nil, err
	}
	ln, err := tcp.ListenRange(ip, cfg.PortLo, cfg.PortHi)
	if err != nil && cfg.PortLo != 0 {
		return nil, fmt.Errorf("GOHCCL_PORT_RANGE=%d-%d: %v", cfg.PortLo, cfg.PortHi, err)
	}
	return ln, err
}

// publicKeys reads every rank's published public key.
func publicKeys(peers []peerInfo) ([]*ecdh.PublicKey, error) {
	keys := make([]*ecdh.PublicKey, len(peers))
	for p := range peers {
		k, err := tcp.ParsePublicKey(peers[p].Key)
		if err != nil {
			return nil, fmt.Errorf("rank %d published no valid public key (%d bytes): %v", p, len(peers[p].Key), err)
		}
		keys[p] = k
	}
	return keys, nil
}

// failPoll is how often a rank that waits for connections looks in the
// store for another rank's report that it could not connect.
const failPoll = 200 * time.Millisecond

// connect dials every lower rank and accepts every higher one, concurrently.
//
// A published address that cannot be reached (refused, unanswered) is given
// up on after window (GOHCCL_PEER_TIMEOUT), not the whole bootstrap
// timeout. The rank that gives up reports it in the store (key fail, and
// the counter fails), and every rank still waiting for connections looks
// there every failPoll: a rank that only accepts (rank 0 always) cannot
// otherwise tell a peer that will never connect from a slow one. Every
// rank's error then names the unreachable address and peer, and what every
// rank published.
// stripes[p] is how many connections to open to a lower rank p.
func connect(store rendezvous.Store, prefix string, ln *tcp.Listener, id *tcp.Identity, rank int, peers []peerInfo,
	stripes []int, window time.Duration, deadline time.Time, log *Logger) (map[int][]*net.TCPConn, error) {
	size := len(peers)
	conns := make(map[int][]*net.TCPConn, size)
	if size == 1 {
		return conns, nil
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)

	var mu sync.Mutex
	var errs []error
	var own bool // errs holds a failure of this rank's own, to report
	fail := func(err error, mine bool) {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range errs {
			if e == err {
				return
			}
		}
		errs = append(errs, err)
		own = own || mine
		cancel(err)
	}

	stopPoll := make(chan struct{})
	polled := make(chan struct{})
	go func() {
		defer close(polled)
		t := time.NewTicker(failPoll)
		defer t.Stop()
		for {
			select {
			case <-stopPoll:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if n, err := store.Add(prefix+"fails", 0); err != nil || n == 0 {
				continue
			}
			msg := "(its report could not be read)"
			if v, err := store.Get(prefix+"fail", time.Second); err == nil {
				msg = string(v)
			}
			fail(fmt.Errorf("%s", msg), false)
			return
		}
	}()

	var wg sync.WaitGroup
	for p := 0; p < rank; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := tcp.DialPeerStripes(ctx, peers[p].Addr, id, rank, p, stripes[p], deadline, window)
			if err != nil {
				if ctx.Err() == nil || !errors.Is(err, context.Cause(ctx)) {
					fail(fmt.Errorf("%v (%s)", err, peers[p].name(p)), true)
				}
				return
			}
			mu.Lock()
			conns[p] = c
			mu.Unlock()
		}()
	}
	if rank < size-1 {
		var higher []int
		for p := rank + 1; p < size; p++ {
			higher = append(higher, p)
		}
		got, err := ln.Accept(ctx, id, rank, higher, deadline, log.Warnf)
		if err != nil && (ctx.Err() == nil || err != context.Cause(ctx)) {
			fail(err, true)
		}
		mu.Lock()
		for p, c := range got {
			conns[p] = c
		}
		mu.Unlock()
	}
	wg.Wait()
	close(stopPoll)
	<-polled
	if len(errs) == 0 {
		return conns, nil
	}
	for _, cs := range conns {
		for _, c := range cs {
			c.Close()
		}
	}
	err := errors.Join(errs...)
	if own {
		// Tell the ranks still waiting, in words they can repeat.
		store.Set(prefix+"fail", []byte(fmt.Sprintf("rank %d reported: %v", rank, err)))
		store.Add(prefix+"fails", 1)
	}
	return nil, fmt.Errorf("%w\n%s", err, published(peers))
}

// published lists the address every rank published and its host, and says
// when some are loopback addresses on a group that spans hosts.
func published(peers []peerInfo) string {
	const show = 16
	var b strings.Builder
	b.WriteString("addresses published:")
	hosts := map[string]bool{}
	var loop []int
	for p, pi := range peers {
		hosts[pi.Host] = true
		if h, _, err := net.SplitHostPort(pi.Addr); err == nil {
			if ip := net.ParseIP(h); ip != nil && ip.IsLoopback() {
				loop = append(loop, p)
			}
		}
		if p < show {
			fmt.Fprintf(&b, " rank %d %s on %s;", p, pi.Addr, hostname(pi.Host))
		}
	}
	if len(peers) > show {
		fmt.Fprintf(&b, " ... (%d ranks)", len(peers))
	}
	if len(loop) > 0 && len(hosts) > 1 {
		fmt.Fprintf(&b, " ranks %v published loopback addresses, which the group's other %d hosts cannot reach: "+
			"set GOHCCL_SOCKET_IFNAME to an interface the hosts share (or leave it unset), and MASTER_ADDR to an address they all reach",
			loop, len(hosts)-1)
	}
	return strings.TrimSuffix(b.String(), ";")
}
