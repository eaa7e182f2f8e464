package shm

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// testRing is the ring the goroutine tests use: small, so that modest
// frames already wrap and stream through in pieces.
const testRing = 4 << 10

// host is the local ranks of one region, each a goroutine of this test.
type host struct {
	region   []byte
	ranks    []int
	matchers []*transport.Matcher
	links    [][]transport.Link // [local][local]
}

// newHost attaches every local rank of a heap region. ranks are the
// communicator ranks (of a group of size) of the local ranks.
func newHost(t testing.TB, ranks []int, size, ringBytes int) *host {
	t.Helper()
	h := &host{region: make([]byte, RegionSize(len(ranks), ringBytes)), ranks: ranks}
	for i, r := range ranks {
		m := transport.NewMatcher(r, size)
		links, err := Attach(h.region, ranks, i, ringBytes, m, testWait)
		require.NoError(t, err)
		h.matchers = append(h.matchers, m)
		h.links = append(h.links, links)
	}
	t.Cleanup(h.close)
	return h
}

func (h *host) close() {
	for _, ls := range h.links {
		for _, l := range ls {
			if l != nil {
				l.Close()
			}
		}
	}
}

func p2pHeader(tag uint64, n int) transport.Header {
	return transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindSend, DType: reduce.Uint8, Count: uint64(n)},
		Tag: tag, Len: uint32(n)}
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := 0; i+8 <= n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], rng.Uint64())
	}
	for i := n &^ 7; i < n; i++ {
		b[i] = byte(rng.Uint32())
	}
	return b
}

var soon = func() time.Time { return time.Now().Add(20 * time.Second) }

func TestRegionLayout(t *testing.T) {
	assert.Equal(t, 0, RegionSize(1, 1<<20)%pageSize)
	assert.Equal(t, minRing, ringCap(1))
	assert.Equal(t, 4160, ringCap(4097), "rounded up to a cache line")
	for _, n := range []int{1, 2, 3, 8} {
		seen := map[int]bool{}
		for from := range n {
			for to := range n {
				if from != to {
					i := ringIndex(from, to, n)
					require.False(t, seen[i], "n=%d ring %d twice", n, i)
					require.Less(t, i, n*(n-1))
					seen[i] = true
				}
			}
		}
		c := ringCap(testRing)
		last := ringsOffset(n) + n*(n-1)*(ringCtl+c)
		require.LessOrEqual(t, last, RegionSize(n, testRing))
	}
}

// TestFrameSizes sends frames around the ring's size in both directions,
// with the receive posted before the frame arrives (read straight into the
// buffer) and after (stashed).
func TestFrameSizes(t *testing.T) {
	c := ringCap(testRing)
	sizes := []int{0, 1, 7, c - transport.HeaderSize - 1, c - transport.HeaderSize, c - 1, c, c + 1, 3*c + 7, 64*c + 13}
	h := newHost(t, []int{3, 1}, 4, testRing)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, posted := range []bool{true, false} {
		for _, n := range sizes {
			for from := range 2 {
				t.Run(fmt.Sprintf("posted=%v/%d/from%d", posted, n, from), func(t *testing.T) {
					to := 1 - from
					payload := randomBytes(rng, n)
					want := string(payload)
					hd := p2pHeader(uint64(n), n)
					r := transport.Recv{Peer: h.ranks[from], Want: hd, Buf: make([]byte, n)}
					if posted {
						h.matchers[to].Post(&r)
					}
					require.NoError(t, h.links[from][to].Send(&hd, payload, soon()))
					clear(payload) // the sender may reuse its buffer at once
					if !posted {
						// Post once the receive goroutine has taken the
						// whole frame off the ring: it waits in the stash.
						in := &h.links[to][from].(*Link).in
						until(t, "the receiver drained the ring", func() bool { return in.head.Load() == in.tail.Load() })
						h.matchers[to].Post(&r)
					}
					require.NoError(t, h.matchers[to].Wait(&r, soon()))
					require.Equal(t, h.ranks[from], r.Source)
					require.True(t, want == string(r.Buf), "payload differs")
				})
			}
		}
	}
}

// stream sends count frames of random sizes up to maxSize from local rank
// from to local rank to, receiving each in order, and checks every byte.
func stream(t *testing.T, h *host, from, to, count, maxSize int, seed uint64) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 1))
		for i := range count {
			n := rng.IntN(maxSize + 1)
			hd := p2pHeader(uint64(i), n)
			if err := h.links[from][to].Send(&hd, randomBytes(rng, n), soon()); err != nil {
				t.Errorf("frame %d: %v", i, err)
				return
			}
		}
	}()
	rng := rand.New(rand.NewPCG(seed, 1))
	var r transport.Recv
	for i := range count {
		n := rng.IntN(maxSize + 1)
		want := randomBytes(rng, n)
		r.Peer, r.Want, r.Buf = h.ranks[from], p2pHeader(uint64(i), n), make([]byte, n)
		h.matchers[to].Post(&r)
		if err := h.matchers[to].Wait(&r, soon()); err != nil {
			t.Fatalf("frame %d from local %d: %v", i, from, err)
		}
		if string(want) != string(r.Buf) {
			t.Fatalf("frame %d of %d bytes from local %d differs", i, n, from)
		}
	}
	wg.Wait()
}

func TestManySmallFrames(t *testing.T) {
	h := newHost(t, []int{0, 1}, 2, testRing)
	stream(t, h, 0, 1, 20000, 100, 7)
}

// TestInterleavedDirections streams both ways at once, small and large
// frames mixed, so that each side's sends and receives run together.
func TestInterleavedDirections(t *testing.T) {
	h := newHost(t, []int{0, 1, 2}, 3, testRing)
	var wg sync.WaitGroup
	for from := range 3 {
		for to := range 3 {
			if from != to {
				wg.Add(1)
				go func() {
					defer wg.Done()
					stream(t, h, from, to, 300, 3*ringCap(testRing)+7, uint64(10*from+to))
				}()
			}
		}
	}
	wg.Wait()
}

// TestTags posts point-to-point receives out of the frames' order and from
// any source.
func TestTags(t *testing.T) {
	h := newHost(t, []int{0, 1, 2}, 3, testRing)
	const frames = 20
	var recvs [frames]transport.Recv
	for i := range recvs {
		tag := uint64(frames - 1 - i)
		peer := 1
		if i%3 == 0 {
			peer = transport.AnySource
		}
		recvs[i] = transport.Recv{Peer: peer, Want: p2pHeader(tag, int(tag)*1000), Buf: make([]byte, int(tag)*1000)}
		h.matchers[0].Post(&recvs[i])
	}
	for tag := range frames {
		b := make([]byte, tag*1000)
		for i := range b {
			b[i] = byte(tag)
		}
		hd := p2pHeader(uint64(tag), len(b))
		require.NoError(t, h.links[1][0].Send(&hd, b, soon()))
	}
	for i := range recvs {
		require.NoError(t, h.matchers[0].Wait(&recvs[i], soon()))
		assert.Equal(t, 1, recvs[i].Source)
		for _, c := range recvs[i].Buf {
			if int(c) != frames-1-i {
				t.Fatalf("receive %d got a byte %d", i, c)
			}
		}
	}
	// A receive of another size fails with both sizes; the link goes on.
	bad := transport.Recv{Peer: 1, Want: p2pHeader(99, 5), Buf: make([]byte, 5)}
	h.matchers[0].Post(&bad)
	hd := p2pHeader(99, 6)
	require.NoError(t, h.links[1][0].Send(&hd, make([]byte, 6), soon()))
	require.ErrorIs(t, h.matchers[0].Wait(&bad, soon()), transport.ErrSize)
	stream(t, h, 1, 0, 10, 100, 3)
}

// TestCloseFailsPeer closes one side and checks that the other's receives
// and sends fail at once with the closing rank named.
func TestCloseFailsPeer(t *testing.T) {
	h := newHost(t, []int{4, 9}, 10, testRing)
	hd := p2pHeader(1, 10)
	peerWaits := transport.Recv{Peer: 4, Want: hd, Buf: make([]byte, 10)}
	h.matchers[1].Post(&peerWaits)
	ownWaits := transport.Recv{Peer: 9, Want: hd, Buf: make([]byte, 10)}
	h.matchers[0].Post(&ownWaits)

	until(t, "both receive goroutines sleep on their futex", func() bool {
		return h.links[0][1].(*Link).in.tail.Sleepers() > 0 && h.links[1][0].(*Link).in.tail.Sleepers() > 0
	})
	start := time.Now()
	require.NoError(t, h.links[0][1].Close())
	assert.Less(t, time.Since(start), 100*time.Millisecond, "Close wakes its sleeping receive goroutine")

	err := h.matchers[1].Wait(&peerWaits, soon())
	require.ErrorIs(t, err, transport.ErrPeerLost)
	assert.Contains(t, err.Error(), "rank 4 closed its shared-memory link")
	err = h.links[1][0].Send(&hd, make([]byte, 10), soon())
	require.ErrorIs(t, err, transport.ErrPeerLost)
	assert.Contains(t, err.Error(), "rank 4")
	assert.Less(t, time.Since(start), time.Second)

	err = h.matchers[0].Wait(&ownWaits, soon())
	require.ErrorIs(t, err, transport.ErrClosed)
	require.ErrorIs(t, h.links[0][1].Send(&hd, make([]byte, 10), soon()), transport.ErrClosed)
	require.NoError(t, h.links[0][1].Close(), "a second close is fine")
}

// TestFramesBeforeCloseArrive checks that frames sent before a close are
// still delivered; only then does the peer report the close.
func TestFramesBeforeCloseArrive(t *testing.T) {
	h := newHost(t, []int{0, 1}, 2, testRing)
	payload := randomBytes(rand.New(rand.NewPCG(3, 3)), 2*ringCap(testRing))
	hd := p2pHeader(5, len(payload))
	done := make(chan error, 1)
	go func() { done <- h.links[0][1].Send(&hd, payload, soon()) }()
	r := transport.Recv{Peer: 0, Want: hd, Buf: make([]byte, len(payload))}
	h.matchers[1].Post(&r)
	require.NoError(t, <-done)
	small := p2pHeader(6, 3)
	require.NoError(t, h.links[0][1].Send(&small, []byte("abc"), soon()))
	require.NoError(t, h.links[0][1].Close())
	require.NoError(t, h.matchers[1].Wait(&r, soon()))
	require.Equal(t, payload, r.Buf)
	got, err := h.recvFrom0(small)
	require.NoError(t, err)
	require.Equal(t, "abc", string(got))
	_, err = h.recvFrom0(small)
	require.ErrorIs(t, err, transport.ErrPeerLost)
}

// recvFrom0 posts a receive on local rank 1 for the frame hd from rank 0
// and waits for it.
func (h *host) recvFrom0(hd transport.Header) ([]byte, error) {
	r := transport.Recv{Peer: 0, Want: hd, Buf: make([]byte, hd.Len)}
	h.matchers[1].Post(&r)
	return r.Buf, h.matchers[1].Wait(&r, soon())
}

// TestPeerGoneDeliversFirst: told that the peer's process ended (its
// socket closed, PeerGone), a link still delivers the frames the peer
// wrote before, then fails the peer's receives with that reason at once,
// waking a receive goroutine asleep on the ring.
func TestPeerGoneDeliversFirst(t *testing.T) {
	h := newHost(t, []int{0, 1}, 2, testRing)
	small := p2pHeader(6, 3)
	require.NoError(t, h.links[0][1].Send(&small, []byte("abc"), soon()))
	until(t, "the receive goroutine sleeps on its futex", func() bool { return h.links[1][0].(*Link).in.tail.Sleepers() > 0 })
	gone := fmt.Errorf("%w: rank 0 closed the connection", transport.ErrPeerLost)
	start := time.Now()
	h.links[1][0].(*Link).PeerGone(gone)
	got, err := h.recvFrom0(small)
	require.NoError(t, err)
	require.Equal(t, "abc", string(got))
	_, err = h.recvFrom0(small)
	require.ErrorIs(t, err, gone)
	assert.Less(t, time.Since(start), 100*time.Millisecond, "PeerGone wakes the sleeping receive goroutine")
}

// halfHost attaches only local rank 1 of a pair: local rank 0's side of the
// region is left for the test to play, byte by byte.
func halfHost(t *testing.T) (region []byte, l transport.Link, m *transport.Matcher) {
	region = make([]byte, RegionSize(2, testRing))
	m = transport.NewMatcher(1, 2)
	links, err := Attach(region, []int{0, 1}, 1, testRing, m, testWait)
	require.NoError(t, err)
	t.Cleanup(func() { links[0].Close() })
	return region, links[0], m
}

// TestBlockedSendFailsOnPeerClose fills the ring of a peer that never
// reads, then closes the peer's end: the blocked send fails at once.
func TestBlockedSendFailsOnPeerClose(t *testing.T) {
	region, l, _ := halfHost(t)
	payload := make([]byte, 3*ringCap(testRing))
	hd := p2pHeader(1, len(payload))
	done := make(chan error, 1)
	go func() { done <- l.Send(&hd, payload, soon()) }()
	select {
	case err := <-done:
		t.Fatalf("send returned while the ring was full: %v", err)
	case <-time.After(30 * time.Millisecond):
	}
	start := time.Now()
	toPeer := ringAt(region, 2, 1, 0, ringCap(testRing))
	toPeer.close(receiverClosed) // what the peer's Close writes
	err := <-done
	require.ErrorIs(t, err, transport.ErrPeerLost)
	assert.Less(t, time.Since(start), 200*time.Millisecond)
}

// TestSendDeadline: a send into a ring nobody drains fails at its
// deadline, and the cut-off frame breaks the link for later sends.
func TestSendDeadline(t *testing.T) {
	_, l, _ := halfHost(t)
	payload := make([]byte, 3*ringCap(testRing))
	hd := p2pHeader(1, len(payload))
	start := time.Now()
	err := l.Send(&hd, payload, time.Now().Add(50*time.Millisecond))
	require.ErrorIs(t, err, transport.ErrTimeout)
	assert.Contains(t, err.Error(), "rank 0 did not take the data in time")
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	assert.Less(t, time.Since(start), time.Second)
	small := p2pHeader(2, 1)
	err = l.Send(&small, []byte{1}, soon())
	require.ErrorIs(t, err, transport.ErrTimeout)
	assert.Contains(t, err.Error(), "cut off")
}

// TestReceiveDeadline: a receive nothing arrives for fails at its deadline.
func TestReceiveDeadline(t *testing.T) {
	h := newHost(t, []int{0, 1}, 2, testRing)
	r := transport.Recv{Peer: 0, Want: p2pHeader(1, 1), Buf: make([]byte, 1)}
	h.matchers[1].Post(&r)
	start := time.Now()
	require.ErrorIs(t, h.matchers[1].Wait(&r, time.Now().Add(30*time.Millisecond)), transport.ErrTimeout)
	assert.Less(t, time.Since(start), time.Second)
	stream(t, h, 0, 1, 5, 100, 1) // the link still works
}

// TestCorruptRing plays a peer that writes garbage into the ring: each
// case must fail the posted receive with a protocol error naming the peer.
func TestCorruptRing(t *testing.T) {
	good := p2pHeader(1, 8)
	cases := map[string]func(r *ring){
		"magic": func(r *ring) {
			var b [transport.HeaderSize]byte
			good.Encode(b[:])
			b[0] ^= 1
			r.put(0, b[:])
			r.tail.Store(transport.HeaderSize)
		},
		"oversize": func(r *ring) {
			var b [transport.HeaderSize]byte
			good.Encode(b[:])
			binary.LittleEndian.PutUint32(b[36:], transport.MaxPayload+1)
			r.put(0, b[:])
			r.tail.Store(transport.HeaderSize)
		},
		"tail beyond the ring": func(r *ring) { r.tail.Store(r.cap + 1) },
		"tail backwards": func(r *ring) {
			var b [transport.HeaderSize + 8]byte
			good.Encode(b[:])
			r.put(0, b[:])
			r.tail.Store(transport.HeaderSize + 4)
			// The receiver has seen the half frame and waits for the rest.
			for deadline := time.Now().Add(10 * time.Second); r.tail.Sleepers() == 0 && time.Now().Before(deadline); {
				time.Sleep(50 * time.Microsecond)
			}
			r.tail.Store(3)
		},
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			region, _, m := halfHost(t)
			r := transport.Recv{Peer: 0, Want: good, Buf: make([]byte, 8)}
			m.Post(&r)
			fromPeer := ringAt(region, 2, 0, 1, ringCap(testRing))
			corrupt(&fromPeer)
			err := m.Wait(&r, soon())
			require.ErrorIs(t, err, transport.ErrProtocol)
			assert.Contains(t, err.Error(), "rank 0")
			// The peer is told too: its ring from this rank is closed.
			toPeer := ringAt(region, 2, 1, 0, ringCap(testRing))
			assert.True(t, toPeer.closedBy(senderClosed))
		})
	}
}

// TestCorruptHead plays a peer whose receiver claims to have consumed more
// than was sent.
func TestCorruptHead(t *testing.T) {
	region, l, _ := halfHost(t)
	toPeer := ringAt(region, 2, 1, 0, ringCap(testRing))
	toPeer.head.Store(1 << 40)
	payload := make([]byte, 2*ringCap(testRing))
	hd := p2pHeader(1, len(payload))
	err := l.Send(&hd, payload, soon())
	require.ErrorIs(t, err, transport.ErrProtocol)
	assert.Contains(t, err.Error(), "rank 0 corrupted")
}

func TestAttachRefuses(t *testing.T) {
	m := transport.NewMatcher(0, 2)
	region := make([]byte, RegionSize(2, testRing))
	_, err := Attach(region[:len(region)-1], []int{0, 1}, 0, testRing, m, testWait)
	assert.ErrorContains(t, err, "too small")
	_, err = Attach(region, []int{0, 1}, 2, testRing, m, testWait)
	assert.ErrorContains(t, err, "local index 2")
	_, err = Attach(region, []int{1, 1}, 0, testRing, m, testWait)
	assert.ErrorContains(t, err, "both communicator rank 1")
	links, err := Attach(region, []int{0, 1}, 0, testRing, m, testWait)
	require.NoError(t, err)
	defer links[1].Close()
	_, err = Attach(region, []int{0, 1}, 1, testRing/2, transport.NewMatcher(1, 2), testWait)
	assert.ErrorContains(t, err, "laid out for 2 local ranks with 4096-byte rings")
	garbage := make([]byte, RegionSize(2, testRing))
	garbage[7] = 0xee
	_, err = Attach(garbage, []int{0, 1}, 0, testRing, m, testWait)
	assert.ErrorContains(t, err, "does not hold gohccl rings")
	assert.Equal(t, "shm", links[1].Class())
	assert.Nil(t, links[0])
}

// TestNoAllocations checks that a steady ping-pong allocates nothing.
func TestNoAllocations(t *testing.T) {
	if testing.Short() {
		t.Skip()
	}
	p := newPingPong(t, 4<<10, testRing)
	defer p.stop()
	p.roundTrip()
	allocs := testing.AllocsPerRun(200, p.roundTrip)
	assert.Zero(t, allocs)
}

// pingPong is two goroutine ranks bouncing one frame back and forth.
type pingPong struct {
	t       testing.TB
	h       *host
	hd      transport.Header
	payload []byte
	r       transport.Recv
	done    chan struct{}
}

func newPingPong(t testing.TB, size, ringBytes int) *pingPong {
	p := &pingPong{t: t, h: newHost(t, []int{0, 1}, 2, ringBytes), hd: p2pHeader(1, size),
		payload: make([]byte, size), done: make(chan struct{})}
	p.r = transport.Recv{Peer: 1, Want: p.hd, Buf: make([]byte, size)}
	echo := transport.Recv{Peer: 0, Want: p.hd, Buf: make([]byte, size)}
	go func() {
		defer close(p.done)
		for {
			p.h.matchers[1].Post(&echo)
			if p.h.matchers[1].Wait(&echo, soon()) != nil {
				return
			}
			if p.h.links[1][0].Send(&p.hd, echo.Buf, soon()) != nil {
				return
			}
		}
	}()
	return p
}

func (p *pingPong) roundTrip() {
	p.h.matchers[0].Post(&p.r)
	if err := p.h.links[0][1].Send(&p.hd, p.payload, soon()); err != nil {
		p.t.Fatal(err)
	}
	if err := p.h.matchers[0].Wait(&p.r, soon()); err != nil {
		p.t.Fatal(err)
	}
}

func (p *pingPong) stop() {
	p.h.close()
	<-p.done
}

func TestParseStat(t *testing.T) {
	line := []byte("4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 12345 678\n")
	state, start, ok := parseStat(line)
	require.True(t, ok)
	assert.Equal(t, byte('S'), state)
	assert.Equal(t, uint64(987654), start)
	for _, bad := range []string{"", "1 (x) S 1 2", "1 (x) SS 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20", "1 (x) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 x9"} {
		_, _, ok := parseStat([]byte(bad))
		assert.False(t, ok, bad)
	}
	self := selfIdentity()
	require.NotZero(t, self.pid, "this process can read its own /proc entry")
	var r procReader
	assert.False(t, self.dead(self, &r))
	gone := self
	gone.start++
	assert.True(t, gone.dead(self, &r), "a reused pid is a dead peer")
	allocs := testing.AllocsPerRun(100, func() { self.dead(self, &r) })
	assert.Zero(t, allocs, "a liveness check allocates nothing")
}

// until waits for cond (a state another goroutine reaches), failing the test
// after 10 s with what it waited for.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(50 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
	}
}

// TestEarlyFramesAreBounded: a sender that runs far ahead of the
// receiver's posted receives (a broadcast's root) makes the receiver keep
// at most the matcher's early-frame limit; past it the receive goroutine
// stops draining the ring, the ring fills, and the sender sleeps until
// there is room. Once the receives are posted every frame arrives in
// order, intact.
func TestEarlyFramesAreBounded(t *testing.T) {
	const limit = 8 << 10
	const seg = 512
	const frames = 400 // 200 KiB: far more than the limit and the ring
	region := make([]byte, RegionSize(2, testRing))
	m0, m1 := transport.NewMatcher(0, 2), transport.NewMatcher(1, 2)
	m1.SetEarlyLimit(limit)
	var links [2][]transport.Link
	for i, m := range []*transport.Matcher{m0, m1} {
		ls, err := Attach(region, []int{0, 1}, i, testRing, m, testWait)
		require.NoError(t, err)
		links[i] = ls
	}
	t.Cleanup(func() {
		links[0][1].Close()
		links[1][0].Close()
	})

	data := randomBytes(rand.New(rand.NewPCG(4, 4)), frames*seg)
	frame := func(j int) transport.Header {
		return transport.Header{Fingerprint: transport.Fingerprint{Kind: transport.KindBroadcast, DType: reduce.Uint8, Count: seg},
			Seq: uint64(j + 1), Tag: transport.StepTag(1, 0, 0), Len: seg}
	}
	var sent atomic.Int64
	sendErr := make(chan error, 1)
	go func() {
		for j := range frames {
			h := frame(j)
			if err := links[0][1].Send(&h, data[j*seg:(j+1)*seg], soon()); err != nil {
				sendErr <- err
				return
			}
			sent.Add(1)
		}
		sendErr <- nil
	}()

	// Held back: the receiver keeps its limit, its ring is full (less than
	// a frame free), and the sender sleeps on the ring's head. A receive
	// goroutine that kept draining would let the sender finish instead.
	out := &links[0][1].(*Link).out
	until(t, "the sender is held back", func() bool {
		select {
		case err := <-sendErr:
			t.Fatalf("the sender sent all %d frames (%v) past a receiver that keeps %d bytes", frames, err, limit)
		default:
		}
		free := out.cap - (out.tail.Load() - out.head.Load())
		return m1.EarlyBytes(0) == limit && free < seg+transport.HeaderSize && out.head.Sleepers() > 0
	})
	assert.Less(t, sent.Load(), int64(frames))
	// A collective's end settles its links (comm.settle): the frames held
	// back belong to later ops, so Settle must not wait for them. It did,
	// out to its budget, at the end of every op of a stream whose root ran
	// that far ahead.
	start := time.Now()
	links[1][0].(*Link).Settle(time.Minute)
	assert.Less(t, time.Since(start), 5*time.Second, "Settle waited for frames the matcher holds back")

	for j := range frames {
		h := frame(j)
		r := transport.Recv{Peer: 0, Want: h, Buf: make([]byte, seg)}
		m1.Post(&r)
		require.NoError(t, m1.Wait(&r, soon()), "frame %d", j)
		require.Equal(t, data[j*seg:(j+1)*seg], r.Buf, "frame %d", j)
		require.LessOrEqual(t, m1.EarlyBytes(0), limit)
	}
	require.NoError(t, <-sendErr)
}
