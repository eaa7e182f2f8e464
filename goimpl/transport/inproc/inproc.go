// Package inproc connects goroutine ranks of one process: a send copies the
// payload straight into the receiver's matcher. It runs the real algorithms
// at any world size in tests, with no sockets.
package inproc

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gohccl/gohccl/goimpl/transport"
)

// NewWorld returns the meshes of size ranks connected to each other.
func NewWorld(size int) []*transport.Mesh {
	matchers := make([]*transport.Matcher, size)
	for r := range matchers {
		matchers[r] = transport.NewMatcher(r, size)
	}
	meshes := make([]*transport.Mesh, size)
	for r := range meshes {
		links := make([]transport.Link, size)
		for p := range links {
			if p != r {
				links[p] = &link{from: r, to: p, dst: matchers[p], self: matchers[r]}
			}
		}
		meshes[r] = transport.NewMesh(r, links, matchers[r])
	}
	// Closing one end must be seen by the other, as a socket would be.
	for r := range meshes {
		for p := range meshes {
			if p != r {
				l := meshes[r].LinkTo(p).(*link)
				l.peer = meshes[p].LinkTo(r).(*link)
			}
		}
	}
	return meshes
}

type link struct {
	from, to  int
	dst, self *transport.Matcher
	peer      *link
	closed    atomic.Bool
}

func (l *link) Class() string { return "inproc" }

func (l *link) Send(h *transport.Header, payload []byte, _ time.Time) error {
	if l.closed.Load() {
		return fmt.Errorf("%w: link to rank %d is closed", transport.ErrPeerLost, l.to)
	}
	l.dst.Deliver(l.from, h, payload)
	return nil
}

func (l *link) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	err := fmt.Errorf("%w: rank %d closed its link", transport.ErrPeerLost, l.from)
	l.dst.Fail(l.from, err)
	l.peer.closed.Store(true)
	l.self.Fail(l.to, fmt.Errorf("%w: link to rank %d closed", transport.ErrPeerLost, l.to))
	return nil
}
