package tcp

import (
	"crypto/ecdh"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// The handshake proves that both ends of a connection are the ranks they
// claim of one communicator, without a secret that sits in the store. Each
// rank makes an X25519 key pair when it joins and publishes only the public
// key beside its address. Two ranks a < b share the key
//
//	K = HMAC-SHA256(X25519(own private, peer public), "gohccl v2" | comm id | a | b)
//
// which only holders of a's or b's private key can compute. The dialing
// (higher) rank sends a hello with a fresh nonce, the accepting rank answers
// with a nonce of its own and a MAC over both under K, the dialer proves K
// with a MAC over the same transcript, and the acceptor confirms. A reader
// of the store knows the communicator id, every address and every public
// key, and still cannot complete a handshake as any rank; nonces make a
// recorded handshake useless on a later connection.
//
// Messages (little-endian):
//
//	hello     80 bytes  magic "gohcclHI", version, from, to, size, comm id (16), nonce (32),
//	                    stripe, stripes (1 byte each; 0, 0 for one connection), 6 reserved
//	challenge 80 bytes  magic "gohcclCH", rank, 4 reserved, nonce (32), MAC (32)
//	proof     40 bytes  magic "gohcclPF", MAC (32)
//	ok         8 bytes  magic "gohcclOK"
//
// The acceptor reads only these fixed sizes, within handshakeTimeout, before
// a connection is a peer's; nothing it is sent before then is kept.

// Identity is what a rank proves in its handshakes: the communicator, its
// own private key, and every rank's public key (by rank).
type Identity struct {
	CommID [16]byte
	Size   int
	Key    *ecdh.PrivateKey
	Public []*ecdh.PublicKey
}

// NewKey makes a rank's key pair.
func NewKey() (*ecdh.PrivateKey, error) { return ecdh.X25519().GenerateKey(rand.Reader) }

// ParsePublicKey reads a published public key.
func ParsePublicKey(b []byte) (*ecdh.PublicKey, error) { return ecdh.X25519().NewPublicKey(b) }

const (
	helloSize     = 80
	challengeSize = 80
	proofSize     = 40
	okSize        = 8
	nonceSize     = 32
	macSize       = sha256.Size
	// handshakeTimeout bounds how long a connection may take to present its
	// handshake, so a silent stray connection cannot hold a slot.
	handshakeTimeout = 5 * time.Second
	protoVersion     = 2
)

var (
	helloMagic     = [8]byte{'g', 'o', 'h', 'c', 'c', 'l', 'H', 'I'}
	challengeMagic = [8]byte{'g', 'o', 'h', 'c', 'c', 'l', 'C', 'H'}
	proofMagic     = [8]byte{'g', 'o', 'h', 'c', 'c', 'l', 'P', 'F'}
	okMagic        = [8]byte{'g', 'o', 'h', 'c', 'c', 'l', 'O', 'K'}
)

// errHandshakeEnded: the peer closed or reset the connection inside the
// handshake (it refused us, or was not ready); the dialer may retry.
var errHandshakeEnded = errors.New("the peer ended the connection during the handshake")

// hello is the connecting side's first message.
type hello struct {
	Version  uint32
	From, To uint32
	Size     uint32
	CommID   [16]byte
	Nonce    [nonceSize]byte
	// Stripe is this connection's index among the Stripes connections the
	// connecting rank opens to the accepting one (stripe.go); 0 and 0 (read
	// as 1) for one connection.
	Stripe, Stripes uint8
}

func (h *hello) encode(b []byte) {
	copy(b[0:8], helloMagic[:])
	binary.LittleEndian.PutUint32(b[8:], h.Version)
	binary.LittleEndian.PutUint32(b[12:], h.From)
	binary.LittleEndian.PutUint32(b[16:], h.To)
	binary.LittleEndian.PutUint32(b[20:], h.Size)
	copy(b[24:40], h.CommID[:])
	copy(b[40:72], h.Nonce[:])
	clear(b[72:80])
	if h.Stripes > 1 {
		b[72], b[73] = h.Stripe, h.Stripes
	}
}

// decodeHello parses a hello without trusting any of it.
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
	copy(h.Nonce[:], b[40:72])
	if h.Version != protoVersion {
		return h, fmt.Errorf("handshake speaks protocol version %d, this library %d", h.Version, protoVersion)
	}
	for _, c := range b[74:80] {
		if c != 0 {
			return h, errors.New("handshake has reserved bytes set")
		}
	}
	h.Stripe, h.Stripes = b[72], max(b[73], 1)
	if h.Stripes > MaxStripes || h.Stripe >= h.Stripes {
		return h, fmt.Errorf("handshake names stripe %d of %d (at most %d)", h.Stripe, h.Stripes, MaxStripes)
	}
	if b[73] <= 1 && b[72] != 0 {
		return h, errors.New("handshake names a stripe of one connection")
	}
	return h, nil
}

// verify checks a decoded hello's claims against this rank's identity
// (what it claims, not yet who sent it: that is the proof's job).
func (h *hello) verify(id *Identity, rank int) error {
	if h.CommID != id.CommID {
		return errors.New("handshake is for another communicator")
	}
	if int(h.Size) != id.Size || int(h.To) != rank {
		return fmt.Errorf("handshake is for rank %d of %d, this is rank %d of %d", h.To, h.Size, rank, id.Size)
	}
	if int(h.From) <= rank || int(h.From) >= id.Size {
		return fmt.Errorf("handshake from rank %d, which does not connect to rank %d", h.From, rank)
	}
	return nil
}

// pairKey derives the key ranks a and b share (see the top of this file).
func pairKey(id *Identity, peer, self int) ([]byte, error) {
	if id.Key == nil || peer < 0 || peer >= len(id.Public) || id.Public[peer] == nil {
		return nil, fmt.Errorf("no public key of rank %d", peer)
	}
	shared, err := id.Key.ECDH(id.Public[peer])
	if err != nil {
		return nil, fmt.Errorf("key agreement with rank %d: %v", peer, err)
	}
	a, b := min(peer, self), max(peer, self)
	m := hmac.New(sha256.New, shared)
	m.Write([]byte("gohccl v2"))
	m.Write(id.CommID[:])
	var ranks [8]byte
	binary.LittleEndian.PutUint32(ranks[0:], uint32(a))
	binary.LittleEndian.PutUint32(ranks[4:], uint32(b))
	m.Write(ranks[:])
	return m.Sum(nil), nil
}

// transcriptMAC is the MAC under key of label, the hello and the
// challenge's first 48 bytes (magic, rank, nonce).
func transcriptMAC(key []byte, label string, helloMsg, challengeHead []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(label))
	m.Write(helloMsg)
	m.Write(challengeHead)
	return m.Sum(nil)
}

// serverHandshake runs the accepting side and returns the peer's verified
// hello (its rank and stripe).
func serverHandshake(c *net.TCPConn, id *Identity, rank int, deadline time.Time) (hello, error) {
	d := time.Now().Add(handshakeTimeout)
	if deadline.Before(d) {
		d = deadline
	}
	c.SetDeadline(d)
	var hb [helloSize]byte
	if _, err := io.ReadFull(c, hb[:]); err != nil {
		return hello{}, fmt.Errorf("reading handshake: %w", err)
	}
	h, err := decodeHello(hb[:])
	if err == nil {
		err = h.verify(id, rank)
	}
	if err != nil {
		return hello{}, err
	}
	from := int(h.From)
	key, err := pairKey(id, from, rank)
	if err != nil {
		return hello{}, err
	}
	var ch [challengeSize]byte
	copy(ch[0:8], challengeMagic[:])
	binary.LittleEndian.PutUint32(ch[8:], uint32(rank))
	if _, err := rand.Read(ch[16:48]); err != nil {
		return hello{}, err
	}
	copy(ch[48:], transcriptMAC(key, "gohccl acceptor", hb[:], ch[:48]))
	if _, err := c.Write(ch[:]); err != nil {
		return hello{}, fmt.Errorf("answering the handshake of rank %d: %w", from, err)
	}
	var pf [proofSize]byte
	if _, err := io.ReadFull(c, pf[:]); err != nil {
		return hello{}, fmt.Errorf("reading the proof of rank %d: %w", from, err)
	}
	if [8]byte(pf[0:8]) != proofMagic || !hmac.Equal(pf[8:], transcriptMAC(key, "gohccl dialer", hb[:], ch[:48])) {
		return hello{}, fmt.Errorf("a connection claiming to be rank %d could not prove it holds rank %d's key", from, from)
	}
	if _, err := c.Write(okMagic[:]); err != nil {
		return hello{}, fmt.Errorf("confirming the handshake of rank %d: %w", from, err)
	}
	c.SetDeadline(time.Time{})
	return h, nil
}

// clientHandshake runs the dialing side against rank to at addr, for
// connection stripe of stripes; the caller has set the connection's deadline.
func clientHandshake(c *net.TCPConn, id *Identity, from, to, stripe, stripes int, addr string) error {
	key, err := pairKey(id, to, from)
	if err != nil {
		return err
	}
	h := hello{Version: protoVersion, From: uint32(from), To: uint32(to), Size: uint32(id.Size), CommID: id.CommID,
		Stripe: uint8(stripe), Stripes: uint8(stripes)}
	if _, err := rand.Read(h.Nonce[:]); err != nil {
		return err
	}
	var hb [helloSize]byte
	h.encode(hb[:])
	if _, err := c.Write(hb[:]); err != nil {
		return ended(err)
	}
	var ch [challengeSize]byte
	if _, err := io.ReadFull(c, ch[:]); err != nil {
		return fmt.Errorf("rank %d at %s refused the handshake (%w): is it the same job and communicator?", to, addr, ended(err))
	}
	if [8]byte(ch[0:8]) != challengeMagic || int(binary.LittleEndian.Uint32(ch[8:])) != to {
		return fmt.Errorf("the peer at %s answered the handshake as something other than rank %d", addr, to)
	}
	if !hmac.Equal(ch[48:], transcriptMAC(key, "gohccl acceptor", hb[:], ch[:48])) {
		return fmt.Errorf("the peer at %s could not prove it holds rank %d's key", addr, to)
	}
	var pf [proofSize]byte
	copy(pf[0:8], proofMagic[:])
	copy(pf[8:], transcriptMAC(key, "gohccl dialer", hb[:], ch[:48]))
	if _, err := c.Write(pf[:]); err != nil {
		return ended(err)
	}
	var ok [okSize]byte
	if _, err := io.ReadFull(c, ok[:]); err != nil || ok != okMagic {
		if err == nil {
			err = errors.New("no confirmation")
		}
		return fmt.Errorf("rank %d at %s did not accept this rank's proof (%w)", to, addr, ended(err))
	}
	return nil
}

// ended marks a connection that closed or reset inside the handshake as
// errHandshakeEnded (retried by the dialer), keeping the cause.
func ended(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err) {
		return fmt.Errorf("%w: %v", errHandshakeEnded, err)
	}
	return err
}
