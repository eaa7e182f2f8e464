package transport

import "errors"

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
