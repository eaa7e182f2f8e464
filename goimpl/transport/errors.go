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
// links. It wraps ErrPeerLost (as far as this communicator is concerned, the
// peer is gone) and the sentinel of the peer's failure, so that a mismatch
// or a timeout is classified alike on every rank.
type PeerAbortError struct {
	// Rank is the rank that aborted.
	Rank int
	// Cause is its error, in its own words.
	Cause string
	// Class is the sentinel its error wrapped (ErrMismatch, ErrTimeout, ...),
	// or nil if none this rank knows.
	Class error
	// Seq is the sequence number of the collective the peer failed in, 0
	// if it was in none or this rank cannot tell (the shared-memory
	// engine's record of a failure does not keep it).
	Seq uint64
}

func (e *PeerAbortError) Error() string { return fmt.Sprintf("rank %d aborted: %s", e.Rank, e.Cause) }

// Unwrap makes errors.Is hold for ErrPeerLost and for the peer's Class.
func (e *PeerAbortError) Unwrap() []error {
	if e.Class == nil || e.Class == ErrPeerLost {
		return []error{ErrPeerLost}
	}
	return []error{e.Class, ErrPeerLost}
}

// abortClasses are the sentinels an abort frame can name, by their code on
// the wire (the frame's tag); code 0 is none of them. The order is the order
// of precedence when an error wraps several.
var abortClasses = [...]error{nil, ErrMismatch, ErrSize, ErrTimeout, ErrProtocol, ErrPeerLost, ErrClosed}

// abortClass returns the wire code of err's sentinel.
func abortClass(err error) uint64 {
	for code, class := range abortClasses {
		if class != nil && errors.Is(err, class) {
			return uint64(code)
		}
	}
	return 0
}

// abortClassOf returns the sentinel of a wire code; nil for 0 or a code a
// newer peer knows and this rank does not.
func abortClassOf(code uint64) error {
	if code < uint64(len(abortClasses)) {
		return abortClasses[code]
	}
	return nil
}

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

// AbortClass returns the code of err's sentinel, as an abort frame carries
// it; the shared-memory engine leaves it beside a failed rank's text.
func AbortClass(err error) uint64 { return abortClass(err) }

// AbortClassOf returns the sentinel of an AbortClass code (nil if none).
func AbortClassOf(code uint64) error { return abortClassOf(code) }
