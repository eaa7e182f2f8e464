// Package rendezvous defines the key-value Store through which the ranks of a
// communicator find each other. In a PyTorch process the C++ shim implements
// it over torch's c10d::Store; tests use MemStore.
package rendezvous

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Store is a key-value store shared by every rank of a group.
type Store interface {
	// Set stores value under key, replacing any earlier value.
	Set(key string, value []byte) error
	// Get waits up to timeout for key to exist and returns its value.
	Get(key string, timeout time.Duration) ([]byte, error)
	// Add atomically adds delta to the integer at key (0 if absent) and
	// returns the new value.
	Add(key string, delta int64) (int64, error)
}

// ErrTimeout is wrapped by a Get whose key did not appear in time.
var ErrTimeout = errors.New("store key did not appear in time")

// MemStore is an in-memory Store for ranks that share a process.
type MemStore struct {
	mu      sync.Mutex
	values  map[string][]byte
	changed chan struct{}
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore {
	return &MemStore{values: map[string][]byte{}, changed: make(chan struct{})}
}

func (s *MemStore) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Set implements Store.
func (s *MemStore) Set(key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.values[key] = append([]byte(nil), value...)
	s.notify()
	return nil
}

// Get implements Store.
func (s *MemStore) Get(key string, timeout time.Duration) ([]byte, error) {
	deadline := time.Now().Add(timeout)
	for {
		s.mu.Lock()
		v, ok := s.values[key]
		ch := s.changed
		s.mu.Unlock()
		if ok {
			return append([]byte(nil), v...), nil
		}
		d := time.Until(deadline)
		if d <= 0 {
			return nil, fmt.Errorf("%w: %q after %v", ErrTimeout, key, timeout)
		}
		select {
		case <-ch:
		case <-time.After(d):
		}
	}
}

// Add implements Store.
func (s *MemStore) Add(key string, delta int64) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	if v, ok := s.values[key]; ok {
		if _, err := fmt.Sscan(string(v), &n); err != nil {
			return 0, fmt.Errorf("store key %q holds %q, not an integer", key, v)
		}
	}
	n += delta
	s.values[key] = []byte(fmt.Sprint(n))
	s.notify()
	return n, nil
}

// Prefixed returns a view of store whose keys all start with prefix, the way
// torch gives each process group a PrefixStore.
func Prefixed(store Store, prefix string) Store { return prefixed{store, prefix} }

type prefixed struct {
	s      Store
	prefix string
}

func (p prefixed) Set(key string, value []byte) error { return p.s.Set(p.prefix+key, value) }
func (p prefixed) Get(key string, timeout time.Duration) ([]byte, error) {
	return p.s.Get(p.prefix+key, timeout)
}
func (p prefixed) Add(key string, delta int64) (int64, error) { return p.s.Add(p.prefix+key, delta) }
