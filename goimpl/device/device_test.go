package device_test

import (
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/gohccl/gohccl/goimpl/device"
	"github.com/gohccl/gohccl/goimpl/device/devicetest"
)

func TestErrorNamesCallAndCode(t *testing.T) {
	err := fmt.Errorf("staging: %w", &device.Error{Call: "aclrtMemcpyAsync", Code: 507899, Detail: "driver error"})
	assert.EqualError(t, err, "staging: aclrtMemcpyAsync returned 507899 (driver error)")
	assert.ErrorIs(t, err, device.ErrRuntime)
	var de *device.Error
	require.True(t, errors.As(err, &de))
	assert.Equal(t, 507899, de.Code)
	assert.EqualError(t, &device.Error{Call: "cudaFreeHost", Code: 1}, "cudaFreeHost returned 1")
}

// TestSetDevice: each adapter reports the device it replaced and calls the
// runtime's set only when the thread's device differs (ACL takes a
// reference on the device at every aclrtSetDevice).
func TestSetDevice(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for kind, set := range map[device.Kind]string{device.CUDA: "cudaSetDevice", device.ACL: "aclrtSetDevice"} {
		f := devicetest.New(kind)
		rt := f.Runtime()
		prev, err := rt.SetDevice(3)
		require.NoError(t, err, kind)
		want := map[device.Kind]int{device.CUDA: 0, device.ACL: -1}[kind] // CUDA threads start on 0; ACL on none
		assert.Equal(t, want, prev, kind)
		prev, err = rt.SetDevice(3)
		require.NoError(t, err)
		assert.Equal(t, 3, prev, kind)
		assert.Equal(t, 1, f.Counters().Calls[set], "%s: calls of %s", kind, set)
		_, err = rt.SetDevice(99)
		assert.ErrorIs(t, err, device.ErrRuntime)
		assert.ErrorContains(t, err, set+" returned")
	}
}

// TestCopiesAndPinned runs a copy each way through each adapter and checks
// what the fake saw: the kinds, the bytes, the pinned allocation freed.
func TestCopiesAndPinned(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for _, kind := range []device.Kind{device.CUDA, device.ACL} {
		f := devicetest.New(kind)
		rt := f.Runtime()
		_, err := rt.SetDevice(1)
		require.NoError(t, err)
		s := f.NewStream(1)
		host, err := rt.AllocHost(100)
		require.NoError(t, err)
		dev := f.Malloc(1, 100)
		f.Write(dev, []byte("device bytes"))
		require.NoError(t, rt.CopyToHost(host[:12], dev, s))
		require.NoError(t, rt.Synchronize(s))
		assert.Equal(t, "device bytes", string(host[:12]), kind)
		copy(host, "host bytes")
		require.NoError(t, rt.CopyToDevice(dev.Add(50), host[:10], s))
		require.NoError(t, rt.Synchronize(s))
		assert.Equal(t, "host bytes", string(f.Read(dev.Add(50), 10)), kind)
		// Go memory is not pinned: refused, and counted.
		assert.ErrorIs(t, rt.CopyToHost(make([]byte, 8), dev, s), device.ErrRuntime)
		require.NoError(t, rt.FreeHost(host))
		c := f.Counters()
		assert.EqualValues(t, 12, c.Down, kind)
		assert.EqualValues(t, 10, c.Up, kind)
		assert.Zero(t, c.LivePinned, kind)
		assert.Len(t, c.Violations, 1, kind)
	}
}
