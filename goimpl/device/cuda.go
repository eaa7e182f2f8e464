package device

import (
	"fmt"
	"unsafe"
)

// The CUDA runtime's values that gohccl passes (driver_types.h).
const (
	cudaMemcpyHostToDevice = 1
	cudaMemcpyDeviceToHost = 2
	// cudaHostAllocPortable pins the memory for every device's context,
	// so one communicator's buffers serve a thread whatever its device.
	cudaHostAllocPortable = 1
)

// CUDAFuncs are the CUDA runtime entry points gohccl calls, with C's types
// as Go integers: each returns the cudaError_t (0 is cudaSuccess). capi
// fills them from the loaded libcudart; tests from a fake.
type CUDAFuncs struct {
	// MemcpyAsync is cudaMemcpyAsync(dst, src, n, kind, stream).
	MemcpyAsync func(dst, src, n uintptr, kind int32, stream uintptr) int32
	// StreamSynchronize is cudaStreamSynchronize(stream).
	StreamSynchronize func(stream uintptr) int32
	// HostAlloc is cudaHostAlloc(&p, n, flags), returning p.
	HostAlloc func(n uintptr, flags uint32) (unsafe.Pointer, int32)
	// FreeHost is cudaFreeHost(p).
	FreeHost func(p unsafe.Pointer) int32
	// GetDevice is cudaGetDevice(&dev), returning dev.
	GetDevice func() (int32, int32)
	// SetDevice is cudaSetDevice(dev).
	SetDevice func(dev int32) int32
	// ErrorString is cudaGetErrorString(code).
	ErrorString func(code int32) string
}

// cudaRuntime is Runtime over the CUDA runtime.
type cudaRuntime struct{ f CUDAFuncs }

// NewCUDA returns the Runtime that calls f.
func NewCUDA(f CUDAFuncs) Runtime { return &cudaRuntime{f} }

func (r *cudaRuntime) Name() string { return "CUDA" }

func (r *cudaRuntime) fail(call string, rc int32) error {
	return &Error{Call: call, Code: int(rc), Detail: r.f.ErrorString(rc)}
}

func (r *cudaRuntime) SetDevice(dev int) (int, error) {
	cur, rc := r.f.GetDevice()
	if rc != 0 {
		return -1, r.fail("cudaGetDevice", rc)
	}
	if int(cur) == dev {
		return dev, nil
	}
	if rc := r.f.SetDevice(int32(dev)); rc != 0 {
		return int(cur), fmt.Errorf("setting device %d: %w", dev, r.fail("cudaSetDevice", rc))
	}
	return int(cur), nil
}

func (r *cudaRuntime) CopyToHost(dst []byte, src Ptr, s Stream) error {
	if err := checkLen("cudaMemcpyAsync", len(dst)); err != nil {
		return err
	}
	if rc := r.f.MemcpyAsync(hostAddr(dst), uintptr(src), uintptr(len(dst)), cudaMemcpyDeviceToHost, uintptr(s)); rc != 0 {
		return r.fail("cudaMemcpyAsync", rc)
	}
	return nil
}

func (r *cudaRuntime) CopyToDevice(dst Ptr, src []byte, s Stream) error {
	if err := checkLen("cudaMemcpyAsync", len(src)); err != nil {
		return err
	}
	if rc := r.f.MemcpyAsync(uintptr(dst), hostAddr(src), uintptr(len(src)), cudaMemcpyHostToDevice, uintptr(s)); rc != 0 {
		return r.fail("cudaMemcpyAsync", rc)
	}
	return nil
}

func (r *cudaRuntime) Synchronize(s Stream) error {
	if rc := r.f.StreamSynchronize(uintptr(s)); rc != 0 {
		return r.fail("cudaStreamSynchronize", rc)
	}
	return nil
}

func (r *cudaRuntime) AllocHost(n int) ([]byte, error) {
	if err := checkLen("cudaHostAlloc", n); err != nil {
		return nil, err
	}
	p, rc := r.f.HostAlloc(uintptr(n), cudaHostAllocPortable)
	if rc != 0 {
		return nil, fmt.Errorf("allocating %d bytes of pinned memory: %w", n, r.fail("cudaHostAlloc", rc))
	}
	return unsafe.Slice((*byte)(p), n), nil
}

func (r *cudaRuntime) FreeHost(b []byte) error {
	if rc := r.f.FreeHost(unsafe.Pointer(unsafe.SliceData(b))); rc != 0 {
		return r.fail("cudaFreeHost", rc)
	}
	return nil
}
