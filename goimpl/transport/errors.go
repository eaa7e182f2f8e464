package transport

import (
	"errors"
	"fmt"
)

// Sentinel errors of the transport layer. Errors returned by this package and
// its subpackages wrap one of these with the peer and the cause, so callers
// classify them with errors.Is.
var (
	// ErrTimeout: the deadline passed before the frame was sent or received.
	ErrTimeout = errors.New("timed out")
	// ErrPeerLost: the connection to a peer closed or failed.
	ErrPeerLost = errors.New("connection to peer lost")
	// ErrMismatch: a peer sent a frame of a different operation than this
	// rank expected: the ranks issued different collectives.
	ErrMismatch = errors.New("collective mismatch")
	// ErrClosed: the mesh was closed or aborted while the operation waited.
	ErrClosed = errors.New("communicator closed")
	// ErrProtocol: a peer sent bytes that are not a valid frame.
	ErrProtocol = errors.New("protocol violation")
	// ErrSize: a point-to-point message's size or type differs from the
	// posted receive's.
	ErrSize = errors.New("message size or type mismatch")
)

// PeerAbortError is how a rank learns why a peer's communicator failed: the
// peer sent its error text in an abort frame (KindAbort) before closing its
// links. It wraps ErrPeerLost: as far as this communicator is concerned, the
// peer is gone.
type PeerAbortError struct {
	// Rank is the rank that aborted.
	Rank int
	// Cause is its error, in its own words.
	Cause string
}

func (e *PeerAbortError) Error() string { return fmt.Sprintf("rank %d aborted: %s", e.Rank, e.Cause) }

// Unwrap makes errors.Is(err, ErrPeerLost) hold.
func (e *PeerAbortError) Unwrap() error { return ErrPeerLost }

// RecvTimeoutError is a receive whose deadline passed before its frame
// arrived. It keeps what was awaited from whom, so that the communicator can
// name the peers it did not hear from.
type RecvTimeoutError struct {
	// Peer is the rank the receive waited for, or AnySource.
	Peer int
	// Want is the frame it waited for.
	Want Header
}

func (e *RecvTimeoutError) Error() string {
	from := fmt.Sprintf("rank %d", e.Peer)
	if e.Peer == AnySource {
		from = "any rank"
	}
	return fmt.Sprintf("%v waiting for %s from %s", ErrTimeout, e.Want.String(), from)
}

// Unwrap makes errors.Is(err, ErrTimeout) hold.
func (e *RecvTimeoutError) Unwrap() error { return ErrTimeout }
