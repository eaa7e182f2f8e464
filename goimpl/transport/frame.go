// Package transport carries frames between the ranks of a communicator.
//
// A frame is a fixed Header followed by Header.Len payload bytes. Every frame
// carries the stamp of the operation it belongs to (sequence number and
// fingerprint), so a receiver that expected a different operation reports
// both sides instead of mixing bytes. A Link moves frames to one peer; its
// receive side hands each arriving frame to the rank's Matcher, which puts it
// into a posted receive or keeps it until one is posted. A Mesh is one rank's
// set of links plus its Matcher: the surface algorithms run on.
package transport

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"

	"github.com/gohccl/gohccl/goimpl/reduce"
)

// HeaderSize is the encoded size of a Header on the wire.
const HeaderSize = 40

// Magic and Version open every encoded header.
const (
	Magic   uint16 = 0x4843 // "HC"
	Version uint8  = 1
)

// MaxPayload bounds one frame's payload; larger transfers are split by the
// caller. A peer announcing more is treated as corrupt.
const MaxPayload = 1 << 30

// MaxAbortText bounds an abort frame's error text: enough for a mismatch
// message naming both fingerprints, small enough that a peer never buffers
// much for a frame no receive asked for.
const MaxAbortText = 2048

// Kind names the operation a frame belongs to.
type Kind uint8

// The kinds of operation. Values are part of the wire format.
const (
	KindInvalid Kind = iota
	KindAllReduce
	KindBroadcast
	KindReduce
	KindAllGather
	KindReduceScatter
	KindGather
	KindScatter
	KindAllToAll
	KindBarrier
	KindSend
	// KindAbort is a failing rank's last frame to each peer: the payload is
	// its error text (at most MaxAbortText bytes), so peers fail with the
	// cause instead of a bare connection loss. It matches no receive.
	KindAbort
	// KindAnnounce carries no payload: a rank that has waited a while in a
	// collective tells its peers which one it is in (its stamp), so that a
	// peer that runs another op as the same sequence number, one that
	// exchanges no frame with it (an op of the shared-memory engine, a
	// rooted op with another root), names the mismatch instead of waiting
	// out the deadline. It matches no receive.
	KindAnnounce
	kindEnd
)

var kindNames = [...]string{"invalid", "allreduce", "broadcast", "reduce", "allgather",
	"reduce_scatter", "gather", "scatter", "alltoall", "barrier", "send", "abort", "announce"}

func (k Kind) String() string {
	if k < kindEnd {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// IsP2P reports whether frames of this kind are point-to-point, matched by
// tag rather than by collective order.
func (k Kind) IsP2P() bool { return k == KindSend }

// Fingerprint identifies a collective across ranks: every rank of a group must
// issue the same fingerprint as its n-th collective.
type Fingerprint struct {
	Kind  Kind
	DType reduce.DType
	Op    reduce.Op
	Root  int32
	Count uint64
}

func (f Fingerprint) String() string {
	s := fmt.Sprintf("%s %s count %d", f.Kind, f.DType, f.Count)
	switch f.Kind {
	case KindAllReduce, KindReduce, KindReduceScatter:
		s += " op " + f.Op.String()
	}
	switch f.Kind {
	case KindBroadcast, KindReduce, KindGather, KindScatter:
		s += fmt.Sprintf(" root %d", f.Root)
	}
	return s
}

// Header is the fixed part of every frame.
type Header struct {
	Fingerprint
	Seq uint64 // the op's sequence number in its communicator; 0 for send/recv
	Tag uint64 // the step within a collective, or the user's tag for send/recv
	Len uint32 // payload bytes that follow
}

// StepTag packs a collective frame's place in its schedule into a tag: the
// phase (8 bits: which part of a composed algorithm), the step (28 bits) and
// the segment within the step (28 bits).
func StepTag(phase, step, segment int) uint64 {
	return uint64(phase)<<56 | uint64(step)<<28 | uint64(segment)
}

// stepName unpacks a StepTag for messages.
func stepName(tag uint64) string {
	return fmt.Sprintf("phase %d step %d segment %d", tag>>56, tag>>28&(1<<28-1), tag&(1<<28-1))
}

func (h Header) String() string {
	if h.Kind == KindAnnounce {
		a := AnnouncedStamp(&h)
		return fmt.Sprintf("announce of #%d (%s)", a.Seq, a.Fingerprint)
	}
	if h.Kind == KindAbort {
		return fmt.Sprintf("abort after #%d (%d bytes of text)", h.Seq, h.Len)
	}
	if h.Kind.IsP2P() {
		return fmt.Sprintf("send %s count %d tag %d (%d bytes)", h.DType, h.Count, h.Tag, h.Len)
	}
	return fmt.Sprintf("#%d %s (%s, %d bytes)", h.Seq, h.Fingerprint, stepName(h.Tag), h.Len)
}

// Encode writes h into b, which must hold HeaderSize bytes.
func (h *Header) Encode(b []byte) {
	_ = b[HeaderSize-1]
	binary.LittleEndian.PutUint16(b[0:], Magic)
	b[2] = Version
	b[3] = uint8(h.Kind)
	b[4] = uint8(h.DType)
	b[5] = uint8(h.Op)
	b[6], b[7] = 0, 0
	binary.LittleEndian.PutUint32(b[8:], uint32(h.Root))
	binary.LittleEndian.PutUint64(b[12:], h.Tag)
	binary.LittleEndian.PutUint64(b[20:], h.Seq)
	binary.LittleEndian.PutUint64(b[28:], h.Count)
	binary.LittleEndian.PutUint32(b[36:], h.Len)
}

// Decode parses an encoded header, refusing anything a correct peer could not
// have sent: wrong magic or version, unknown kind, reserved bits, oversize.
func (h *Header) Decode(b []byte) error {
	if len(b) < HeaderSize {
		return fmt.Errorf("frame header truncated: %d of %d bytes", len(b), HeaderSize)
	}
	if m := binary.LittleEndian.Uint16(b[0:]); m != Magic {
		return fmt.Errorf("frame header has bad magic %#04x (want %#04x)", m, Magic)
	}
	if b[2] != Version {
		return fmt.Errorf("frame header has protocol version %d, this library speaks %d", b[2], Version)
	}
	if b[6] != 0 || b[7] != 0 {
		return fmt.Errorf("frame header has reserved bytes set")
	}
	h.Kind = Kind(b[3])
	if h.Kind == KindInvalid || h.Kind >= kindEnd {
		return fmt.Errorf("frame header has unknown kind %d", b[3])
	}
	h.DType = reduce.DType(b[4])
	if !h.DType.Valid() {
		return fmt.Errorf("frame header has unknown dtype %d", b[4])
	}
	h.Op = reduce.Op(b[5])
	if !h.Op.Valid() {
		return fmt.Errorf("frame header has unknown op %d", b[5])
	}
	h.Root = int32(binary.LittleEndian.Uint32(b[8:]))
	h.Tag = binary.LittleEndian.Uint64(b[12:])
	h.Seq = binary.LittleEndian.Uint64(b[20:])
	h.Count = binary.LittleEndian.Uint64(b[28:])
	h.Len = binary.LittleEndian.Uint32(b[36:])
	if h.Len > MaxPayload {
		return fmt.Errorf("frame header announces %d payload bytes, more than the %d allowed", h.Len, MaxPayload)
	}
	if h.Kind == KindAnnounce && (h.Len != 0 || h.Tag == uint64(KindInvalid) || h.Tag >= uint64(KindSend)) {
		return fmt.Errorf("announce frame of kind %d carries %d payload bytes: it names a collective and has none", h.Tag, h.Len)
	}
	if h.Kind == KindAbort && h.Len > MaxAbortText {
		return fmt.Errorf("abort frame announces %d bytes of text, more than the %d allowed", h.Len, MaxAbortText)
	}
	return nil
}

// AbortFrame builds the abort frame a failing rank sends each peer: seq is
// the sequence number of the collective it was in (0 if none), the tag the
// code of the sentinel cause wraps (see PeerAbortError.Class), the payload
// cause's text, cut to MaxAbortText bytes on a character boundary.
func AbortFrame(seq uint64, cause error) (Header, []byte) {
	text := cause.Error()
	if len(text) > MaxAbortText {
		cut := MaxAbortText
		for cut > 0 && !utf8.RuneStart(text[cut]) {
			cut--
		}
		text = text[:cut]
	}
	return Header{Fingerprint: Fingerprint{Kind: KindAbort}, Seq: seq, Tag: abortClass(cause), Len: uint32(len(text))}, []byte(text)
}

// AnnounceFrame builds the announce frame of the collective stamped stamp
// (see KindAnnounce): the header kind says announce, the tag the op's kind.
func AnnounceFrame(stamp *Header) Header {
	h := Header{Fingerprint: stamp.Fingerprint, Seq: stamp.Seq, Tag: uint64(stamp.Kind)}
	h.Kind = KindAnnounce
	return h
}

// AnnouncedStamp returns the stamp an announce frame carries (Tag and Len
// zero).
func AnnouncedStamp(h *Header) Header {
	a := Header{Fingerprint: h.Fingerprint, Seq: h.Seq}
	a.Kind = Kind(h.Tag)
	return a
}
