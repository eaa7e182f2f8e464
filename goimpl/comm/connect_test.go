package comm

import (
	"crypto/ecdh"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/internal/reftest"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/rendezvous"
	"github.com/gohccl/gohccl/goimpl/transport/tcp"
)

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestBootstrapUnreachableAddressFailsFast: rank 1 publishes an address no
// one listens on (as a rank that listens on loopback does, seen from another
// host). Rank 2, which dials it, gives up after the peer timeout, not the
// bootstrap's; rank 0, which only accepts, learns of it through the store.
// Both errors name the address rank 1 published and rank 1.
func TestBootstrapUnreachableAddressFailsFast(t *testing.T) {
	store := rendezvous.NewMemStore()
	bad := closedPort(t)
	key, err := tcp.NewKey()
	require.NoError(t, err)
	_, err = store.Add("gohccl/gen/1", 1)
	require.NoError(t, err)
	blob, _ := json.Marshal(peerInfo{Addr: bad, Host: "elsewhere/x", PID: 1, Key: key.PublicKey().Bytes()})
	require.NoError(t, store.Set("gohccl/1/peer/1", blob))

	cfg := smallBuffers()
	cfg.PeerTimeout = 2 * time.Second
	start := time.Now()
	errs := make([]error, 3)
	took := make([]time.Duration, 3)
	var wg sync.WaitGroup
	for _, r := range []int{0, 2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := New(store, Options{Rank: r, Size: 3, Timeout: time.Minute, Config: cfg, MasterAddr: "127.0.0.1"})
			if c != nil {
				c.Close()
			}
			errs[r], took[r] = err, time.Since(start)
		}()
	}
	wg.Wait()
	for _, r := range []int{0, 2} {
		require.ErrorIs(t, errs[r], ErrBootstrap, "rank %d", r)
		msg := errs[r].Error()
		assert.Contains(t, msg, "could not reach rank 1 at "+bad, "rank %d", r)
		assert.Contains(t, msg, "rank 1 "+bad+" on elsewhere", "rank %d: the published addresses", r)
		assert.Less(t, took[r], cfg.PeerTimeout+4*time.Second, "rank %d: %v", r, errs[r])
	}
	assert.Contains(t, errs[0].Error(), "rank 2 reported", "rank 0 learned it from rank 2")
}

// TestBootstrapImpostorFails: an impostor that has read everything in the
// store (the communicator id, every address and public key) connects to
// rank 0 claiming to be rank 1 before rank 1 does. It cannot complete the
// handshake; rank 0 drops it, and the real ranks build their communicator
// and reduce correctly.
func TestBootstrapImpostorFails(t *testing.T) {
	store := rendezvous.NewMemStore()
	comms := make([]*Comm, 2)
	var impostor error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var id tcp.Identity
		v, err := store.Get("gohccl/1/id", 10*time.Second)
		if err != nil {
			impostor = nil
			return
		}
		copy(id.CommID[:], v)
		var p0 peerInfo
		v, _ = store.Get("gohccl/1/peer/0", 10*time.Second)
		json.Unmarshal(v, &p0)
		k0, _ := tcp.ParsePublicKey(p0.Key)
		id.Size = 2
		id.Key, _ = tcp.NewKey()
		id.Public = []*ecdh.PublicKey{k0, id.Key.PublicKey()}
		_, impostor = tcp.Dial(p0.Addr, &id, 1, 0, time.Now().Add(5*time.Second))
	}()
	noErrors(t, reftest.OnRanks(2, func(r int) error {
		if r == 1 {
			time.Sleep(300 * time.Millisecond) // the impostor is first
		}
		var err error
		comms[r], err = New(store, Options{Rank: r, Size: 2, Timeout: 20 * time.Second, Config: smallBuffers(), MasterAddr: "127.0.0.1"})
		return err
	}))
	wg.Wait()
	defer comms[0].Close()
	defer comms[1].Close()
	require.Error(t, impostor, "the impostor completed a handshake as rank 1")
	assert.Contains(t, impostor.Error(), "key")

	const count = 1001
	bufs := make([][]byte, 2)
	for r := range bufs {
		bufs[r] = make([]byte, 4*count)
		for i := range count {
			binary.LittleEndian.PutUint32(bufs[r][4*i:], math.Float32bits(float32(i*(r+1))))
		}
	}
	noErrors(t, reftest.OnRanks(2, func(r int) error {
		return comms[r].AllReduce(bufs[r], count, reduce.Float32, reduce.Sum, 0)
	}))
	for r := range bufs {
		for i := range count {
			got := math.Float32frombits(binary.LittleEndian.Uint32(bufs[r][4*i:]))
			require.Equal(t, float32(3*i), got, "rank %d element %d", r, i)
		}
	}
}

// TestBootstrapPortRange: with GOHCCL_PORT_RANGE every rank listens on a
// port inside it; a range whose every port is taken fails init naming it.
func TestBootstrapPortRange(t *testing.T) {
	// Find three consecutive free ports to make the range of.
	var lo int
	var held []net.Listener
	for base := 40000; base < 60000 && lo == 0; base += 97 {
		held = held[:0]
		ok := true
		for p := base; p < base+3; p++ {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				break
			}
			held = append(held, ln)
		}
		for _, ln := range held {
			ln.Close()
		}
		if ok {
			lo = base
		}
	}
	require.NotZero(t, lo, "no three free consecutive ports")
	cfg := smallBuffers()
	cfg.PortLo, cfg.PortHi = lo, lo+2

	store := rendezvous.NewMemStore()
	comms := make([]*Comm, 2)
	noErrors(t, reftest.OnRanks(2, func(r int) error {
		var err error
		comms[r], err = New(store, Options{Rank: r, Size: 2, Timeout: 20 * time.Second, Config: cfg, MasterAddr: "127.0.0.1"})
		return err
	}))
	for r := range comms {
		comms[r].Close()
		v, err := store.Get(fmt.Sprintf("gohccl/1/peer/%d", r), time.Second)
		require.NoError(t, err)
		var pi peerInfo
		require.NoError(t, json.Unmarshal(v, &pi))
		_, port, _ := net.SplitHostPort(pi.Addr)
		p, _ := strconv.Atoi(port)
		assert.True(t, p >= lo && p <= lo+2, "rank %d listened on %s, outside %d-%d", r, pi.Addr, lo, lo+2)
	}

	for p := lo; p <= lo+2; p++ {
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		require.NoError(t, err)
		defer ln.Close()
	}
	_, err := New(rendezvous.NewMemStore(), Options{Rank: 0, Size: 2, Timeout: 5 * time.Second, Config: cfg, MasterAddr: "127.0.0.1"})
	require.ErrorIs(t, err, ErrBootstrap)
	assert.Contains(t, err.Error(), fmt.Sprintf("GOHCCL_PORT_RANGE=%d-%d", lo, lo+2))
	assert.Contains(t, err.Error(), "every port")
}
