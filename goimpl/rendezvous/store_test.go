package rendezvous

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemStore(t *testing.T) {
	s := Prefixed(NewMemStore(), "g/")
	go func() {
		time.Sleep(20 * time.Millisecond)
		s.Set("k", []byte("v"))
	}()
	v, err := s.Get("k", 2*time.Second)
	require.NoError(t, err)
	assert.Equal(t, "v", string(v))

	n, err := s.Add("ctr", 2)
	require.NoError(t, err)
	assert.Equal(t, int64(2), n)
	n, err = s.Add("ctr", 3)
	require.NoError(t, err)
	assert.Equal(t, int64(5), n)

	start := time.Now()
	_, err = s.Get("missing", 50*time.Millisecond)
	require.ErrorIs(t, err, ErrTimeout)
	assert.Less(t, time.Since(start), time.Second)

	require.NoError(t, s.Set("k", []byte("not a number")))
	_, err = s.Add("k", 1)
	assert.ErrorContains(t, err, "not an integer")
}
