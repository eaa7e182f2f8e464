package transport

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// Link sends frames to one peer. Its receive side, started by whoever made
// the link, hands every frame from that peer to the rank's Matcher and
// reports a lost connection with Matcher.Fail.
type Link interface {
	// Send writes one frame. It returns once payload may be reused. It
	// does not wait for the peer's program to post the matching receive
	// unless the peer already holds its bound of early frames from this
	// rank (TCP: GOHCCL_EARLY_BYTES, docs/protocol.md "Flow").
	Send(h *Header, payload []byte, deadline time.Time) error
	// Class names the transport, for logs: "tcp", "shm", "inproc".
	Class() string
	// Close ends the link; a receive side blocked on it returns.
	Close() error
}

// Mesh is one rank's links to every peer of a communicator, and the matcher
// their frames arrive at. Algorithms run on a Mesh and never learn what
// carries the bytes.
type Mesh struct {
	rank, size int
	links      []Link
	matcher    *Matcher
	closeOnce  sync.Once
}

// NewMesh assembles a mesh. links[rank] is ignored (self-sends go straight to
// the matcher); every other entry must be set.
func NewMesh(rank int, links []Link, m *Matcher) *Mesh {
	return &Mesh{rank: rank, size: len(links), links: links, matcher: m}
}

// Rank returns this rank.
func (m *Mesh) Rank() int { return m.rank }

// Size returns the number of ranks.
func (m *Mesh) Size() int { return m.size }

// Matcher returns the mesh's matcher.
func (m *Mesh) Matcher() *Matcher { return m.matcher }

// Send sends one frame to peer.
func (m *Mesh) Send(peer int, h *Header, payload []byte, deadline time.Time) error {
	if len(payload) != int(h.Len) {
		return fmt.Errorf("internal: frame header says %d bytes, payload has %d", h.Len, len(payload))
	}
	if peer == m.rank {
		m.matcher.Deliver(m.rank, h, payload)
		return nil
	}
	if err := m.links[peer].Send(h, payload, deadline); err != nil {
		return fmt.Errorf("sending %s to rank %d: %w", h.String(), peer, err)
	}
	return nil
}

// Post registers a receive; see Matcher.Post.
func (m *Mesh) Post(r *Recv) { m.matcher.Post(r) }

// Wait waits for a posted receive; see Matcher.Wait.
func (m *Mesh) Wait(r *Recv, deadline time.Time) error { return m.matcher.Wait(r, deadline) }

// Classes describes which transport reaches each peer, e.g. "tcp:3 self:1".
func (m *Mesh) Classes() string {
	counts := map[string]int{}
	var order []string
	for p, l := range m.links {
		c := "self"
		if p != m.rank {
			c = l.Class()
		}
		if counts[c] == 0 {
			order = append(order, c)
		}
		counts[c]++
	}
	parts := make([]string, len(order))
	for i, c := range order {
		parts[i] = fmt.Sprintf("%s:%d", c, counts[c])
	}
	return strings.Join(parts, " ")
}

// Close fails every waiting receive with err and closes every link. It is
// safe to call more than once; the first error wins.
func (m *Mesh) Close(err error) {
	m.closeOnce.Do(func() {
		m.matcher.Close(err)
		for p, l := range m.links {
			if p != m.rank && l != nil {
				l.Close()
			}
		}
	})
}

// LinkTo returns the link to peer (nil for this rank).
func (m *Mesh) LinkTo(peer int) Link { return m.links[peer] }
