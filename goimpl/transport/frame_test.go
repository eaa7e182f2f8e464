package transport

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/reduce"
)

func sampleHeader() Header {
	return Header{
		Fingerprint: Fingerprint{Kind: KindReduceScatter, DType: reduce.BFloat16, Op: reduce.Max, Root: -1, Count: 1<<40 + 3},
		Seq:         77, Tag: StepTag(2, 5, 9), Len: 4096,
	}
}

func TestHeaderRoundTrip(t *testing.T) {
	h := sampleHeader()
	var b [HeaderSize]byte
	h.Encode(b[:])
	var got Header
	require.NoError(t, got.Decode(b[:]))
	assert.Equal(t, h, got)
}

func TestHeaderRejectsMalformed(t *testing.T) {
	h := sampleHeader()
	cases := map[string]struct {
		mutate func(b []byte)
		want   string
	}{
		"magic":    {func(b []byte) { b[0] ^= 0xff }, "bad magic"},
		"version":  {func(b []byte) { b[2] = 9 }, "protocol version 9"},
		"kind":     {func(b []byte) { b[3] = 200 }, "unknown kind"},
		"kind0":    {func(b []byte) { b[3] = 0 }, "unknown kind"},
		"dtype":    {func(b []byte) { b[4] = 77 }, "unknown dtype"},
		"op":       {func(b []byte) { b[5] = 99 }, "unknown op"},
		"reserved": {func(b []byte) { b[7] = 1 }, "reserved"},
		"oversize": {func(b []byte) { b[39] = 0xff }, "payload bytes"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var b [HeaderSize]byte
			h.Encode(b[:])
			tc.mutate(b[:])
			var got Header
			err := got.Decode(b[:])
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	var got Header
	assert.ErrorContains(t, got.Decode(make([]byte, 10)), "truncated")
}

func TestAbortFrame(t *testing.T) {
	h, text := AbortFrame(7, errors.New("allreduce #7 on rank 2 failed: collective mismatch"))
	assert.Equal(t, KindAbort, h.Kind)
	assert.Equal(t, uint64(7), h.Seq)
	assert.Equal(t, uint64(0), h.Tag, "a cause wrapping no sentinel")
	assert.Equal(t, "allreduce #7 on rank 2 failed: collective mismatch", string(text))
	assert.Equal(t, uint32(len(text)), h.Len)
	var b [HeaderSize]byte
	h.Encode(b[:])
	var got Header
	require.NoError(t, got.Decode(b[:]))
	assert.Equal(t, h, got)

	// A long cause is cut to MaxAbortText bytes without splitting a character.
	long := strings.Repeat("é", MaxAbortText) // two bytes each
	h, text = AbortFrame(1, errors.New("x"+long))
	assert.LessOrEqual(t, len(text), MaxAbortText)
	assert.GreaterOrEqual(t, len(text), MaxAbortText-1)
	assert.True(t, utf8.Valid(text), "cut inside a character")

	// The tag names the sentinel the cause wraps, so the peer classifies
	// the failure alike.
	for _, class := range []error{ErrMismatch, ErrSize, ErrTimeout, ErrProtocol, ErrPeerLost, ErrClosed} {
		h, _ := AbortFrame(1, fmt.Errorf("op failed: %w: details", class))
		assert.Equal(t, class, abortClassOf(h.Tag), "%v", class)
	}
	h, _ = AbortFrame(1, fmt.Errorf("%w after %w", ErrTimeout, ErrMismatch))
	assert.Equal(t, ErrMismatch, abortClassOf(h.Tag), "a mismatch takes precedence")
	assert.Nil(t, abortClassOf(200), "a code from a newer peer")

	// A decoder refuses an abort frame announcing more text than that.
	h.Len = MaxAbortText + 1
	h.Encode(b[:])
	assert.ErrorContains(t, got.Decode(b[:]), "abort frame announces")
}

// FuzzHeaderDecode checks that decoding never panics and that whatever it
// accepts encodes back to the same bytes.
func FuzzHeaderDecode(f *testing.F) {
	h := sampleHeader()
	var b [HeaderSize]byte
	h.Encode(b[:])
	f.Add(b[:])
	f.Add(make([]byte, HeaderSize))
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, in []byte) {
		var h Header
		if h.Decode(in) != nil {
			return
		}
		var out [HeaderSize]byte
		h.Encode(out[:])
		if string(out[:]) != string(in[:HeaderSize]) {
			t.Fatalf("decode/encode changed the header: %x -> %x", in[:HeaderSize], out)
		}
		if h.Kind == KindAbort && h.Len > MaxAbortText {
			t.Fatalf("accepted an abort frame of %d bytes", h.Len)
		}
	})
}

// FuzzMatcherDeliver hands arbitrary frames that decode to a matcher with
// a collective and a point-to-point receive posted, as a link would: it
// must not panic, and a receive that completes without error got exactly
// the frame it asked for. The seed corpus is in testdata/fuzz.
func FuzzMatcherDeliver(f *testing.F) {
	want := Header{Fingerprint: Fingerprint{Kind: KindAllReduce, DType: reduce.Float32, Count: 1}, Seq: 1, Len: 4}
	for _, h := range []Header{want, {Fingerprint: Fingerprint{Kind: KindSend, DType: reduce.Uint8, Count: 2}, Tag: 5, Len: 2}} {
		var b [HeaderSize]byte
		h.Encode(b[:])
		f.Add(b[:], []byte{1, 2, 3, 4}, false)
	}
	h, text := AbortFrame(1, fmt.Errorf("%w: x", ErrTimeout))
	var b [HeaderSize]byte
	h.Encode(b[:])
	f.Add(b[:], text, true)
	f.Fuzz(func(t *testing.T, in, payload []byte, viaStash bool) {
		var h Header
		if h.Decode(in) != nil || h.Len > 1<<16 {
			return
		}
		if len(payload) > int(h.Len) {
			payload = payload[:h.Len]
		}
		payload = append(payload, make([]byte, int(h.Len)-len(payload))...)
		m := NewMatcher(0, 2)
		coll := Recv{Peer: 1, Want: want, Buf: make([]byte, 4)}
		p2p := Recv{Peer: AnySource, Want: Header{Fingerprint: Fingerprint{Kind: KindSend, DType: reduce.Uint8, Count: 2}, Tag: 5, Len: 2}, Buf: make([]byte, 2)}
		m.Post(&coll)
		m.Post(&p2p)
		if viaStash {
			if dst, r, discard := m.Arrive(1, &h); r != nil {
				copy(dst, payload)
				m.Complete(r, nil)
			} else if !discard {
				buf := m.StashBuffer(len(payload))
				copy(buf, payload)
				m.Stash(1, &h, buf)
			}
		} else {
			m.Deliver(1, &h, payload)
		}
		for _, r := range []*Recv{&coll, &p2p} {
			if r.Done() && r.Err() == nil && (h.Kind != r.Want.Kind || h.Len != r.Want.Len || h.Tag != r.Want.Tag) {
				t.Fatalf("receive for %v completed by %v", r.Want, h)
			}
		}
		if h.Kind == KindAbort {
			var pa *PeerAbortError
			if !errors.As(coll.Err(), &pa) || pa.Rank != 1 || !errors.As(p2p.Err(), &pa) || m.Err() == nil {
				t.Fatalf("an abort frame did not fail the receives: %v, %v", coll.Err(), p2p.Err())
			}
		}
	})
}

func TestMatcherStashAndOrder(t *testing.T) {
	m := NewMatcher(0, 3)
	mk := func(seq uint64, tag uint64, n int) Header {
		return Header{Fingerprint: Fingerprint{Kind: KindAllReduce, DType: reduce.Uint8, Count: 9}, Seq: seq, Tag: tag, Len: uint32(n)}
	}
	// Two frames from rank 1 arrive before any receive is posted.
	h1, h2 := mk(1, 0, 2), mk(1, 1, 3)
	m.Deliver(1, &h1, []byte{1, 2})
	m.Deliver(1, &h2, []byte{3, 4, 5})
	var r1, r2 Recv
	r1 = Recv{Peer: 1, Want: h1, Buf: make([]byte, 2)}
	r2 = Recv{Peer: 1, Want: h2, Buf: make([]byte, 3)}
	m.Post(&r1)
	m.Post(&r2)
	require.True(t, r1.Done())
	require.NoError(t, r1.Err())
	require.NoError(t, r2.Err())
	assert.Equal(t, []byte{1, 2}, r1.Buf)
	assert.Equal(t, []byte{3, 4, 5}, r2.Buf)

	// A frame of another collective fails the posted receive with both sides named.
	var r3 Recv
	r3 = Recv{Peer: 2, Want: mk(2, 0, 1), Buf: make([]byte, 1)}
	m.Post(&r3)
	other := Header{Fingerprint: Fingerprint{Kind: KindBroadcast, DType: reduce.Uint8, Count: 9, Root: 1}, Seq: 2, Len: 1}
	m.Deliver(2, &other, []byte{7})
	require.True(t, r3.Done())
	require.ErrorIs(t, r3.Err(), ErrMismatch)
	assert.Contains(t, r3.Err().Error(), "allreduce")
	assert.Contains(t, r3.Err().Error(), "broadcast")
	assert.Contains(t, r3.Err().Error(), "rank 2")
}

func TestMatcherFailAndClose(t *testing.T) {
	m := NewMatcher(0, 2)
	r := Recv{Peer: 1, Want: Header{Fingerprint: Fingerprint{Kind: KindBarrier}}}
	m.Post(&r)
	m.Fail(1, ErrPeerLost)
	require.ErrorIs(t, r.Err(), ErrPeerLost)
	var r2 Recv
	r2 = Recv{Peer: 1, Want: Header{Fingerprint: Fingerprint{Kind: KindBarrier}}}
	m.Post(&r2)
	require.ErrorIs(t, r2.Err(), ErrPeerLost, "a receive from a dead peer fails at once")
	m.Close(ErrClosed)
	var r3 Recv
	r3 = Recv{Peer: 0, Want: Header{Fingerprint: Fingerprint{Kind: KindBarrier}}}
	m.Post(&r3)
	require.ErrorIs(t, r3.Err(), ErrClosed)
}

func TestMatcherPeerAbort(t *testing.T) {
	// Through Deliver (in-process links), and through Arrive/StashBuffer/
	// Stash as a socket link's receive side does it: both close the matcher
	// with the peer's cause, whatever the waiting receives were for.
	for _, path := range []string{"deliver", "arrive"} {
		t.Run(path, func(t *testing.T) {
			m := NewMatcher(0, 3)
			coll := Recv{Peer: 1, Want: Header{Fingerprint: Fingerprint{Kind: KindBarrier}, Seq: 4}}
			p2p := Recv{Peer: 1, Want: Header{Fingerprint: Fingerprint{Kind: KindSend, DType: reduce.Uint8, Count: 1}, Tag: 5, Len: 1}, Buf: make([]byte, 1)}
			m.Post(&coll)
			m.Post(&p2p)
			h, text := AbortFrame(4, fmt.Errorf("barrier #4 on rank 2 failed: %w: details", ErrMismatch))
			switch path {
			case "deliver":
				m.Deliver(2, &h, text)
			default:
				dst, r, discard := m.Arrive(2, &h)
				require.Nil(t, dst)
				require.Nil(t, r, "an abort frame matches no receive")
				require.False(t, discard, "an abort frame's text must be read")
				buf := m.StashBuffer(int(h.Len))
				copy(buf, text)
				m.Stash(2, &h, buf)
			}
			for _, r := range []*Recv{&coll, &p2p} {
				require.True(t, r.Done())
				require.ErrorIs(t, r.Err(), ErrPeerLost)
				require.ErrorIs(t, r.Err(), ErrMismatch, "classified as the peer classified it")
				require.NotErrorIs(t, r.Err(), ErrTimeout)
				var pa *PeerAbortError
				require.ErrorAs(t, r.Err(), &pa)
				assert.Equal(t, 2, pa.Rank)
				assert.Equal(t, "rank 2 aborted: barrier #4 on rank 2 failed: collective mismatch: details", r.Err().Error())
			}
			require.Error(t, m.Err())
			later := Recv{Peer: 2, Want: Header{Fingerprint: Fingerprint{Kind: KindBarrier}, Seq: 5}}
			m.Post(&later)
			require.True(t, later.Done(), "a receive after the abort fails at once")
			assert.Contains(t, later.Err().Error(), "rank 2 aborted")
		})
	}
}

func TestMatcherErrAndPending(t *testing.T) {
	m := NewMatcher(0, 2)
	require.NoError(t, m.Err())
	r := Recv{Peer: 1, Want: Header{Fingerprint: Fingerprint{Kind: KindBarrier}, Seq: 1}}
	assert.False(t, r.Pending(), "never posted")
	m.Post(&r)
	assert.True(t, r.Pending())
	m.Close(ErrClosed)
	assert.False(t, r.Pending())
	require.ErrorIs(t, m.Err(), ErrClosed)
	m.Close(ErrTimeout)
	require.ErrorIs(t, m.Err(), ErrClosed, "the first close wins")
}

func TestMatcherLastSeqAndTimeout(t *testing.T) {
	m := NewMatcher(0, 3)
	assert.Equal(t, uint64(0), m.LastSeq(1))
	h := Header{Fingerprint: Fingerprint{Kind: KindAllReduce, DType: reduce.Uint8, Count: 1}, Seq: 3, Len: 1}
	m.Deliver(1, &h, []byte{1}) // stashed: nobody posted it
	p2p := Header{Fingerprint: Fingerprint{Kind: KindSend, DType: reduce.Uint8, Count: 1}, Tag: 9, Len: 1}
	m.Deliver(1, &p2p, []byte{2})
	assert.Equal(t, uint64(3), m.LastSeq(1), "point-to-point frames carry no sequence number")
	assert.Equal(t, uint64(0), m.LastSeq(2))
	assert.Equal(t, uint64(0), m.LastSeq(7), "outside the group")

	r := Recv{Peer: 2, Want: Header{Fingerprint: Fingerprint{Kind: KindBarrier}, Seq: 4}}
	m.Post(&r)
	err := m.Wait(&r, time.Now().Add(10*time.Millisecond))
	require.ErrorIs(t, err, ErrTimeout)
	var te *RecvTimeoutError
	require.ErrorAs(t, err, &te)
	assert.Equal(t, 2, te.Peer)
	assert.Equal(t, "timed out waiting for #4 barrier float32 count 0 (phase 0 step 0 segment 0, 0 bytes) from rank 2", err.Error())

	any := Recv{Peer: AnySource, Want: p2p}
	any.Want.Tag = 10
	any.Buf = make([]byte, 1)
	m.Post(&any)
	assert.ErrorContains(t, m.Wait(&any, time.Now().Add(time.Millisecond)), "from any rank")
}
