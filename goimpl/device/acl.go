package device

import (
	"fmt"
	"unsafe"
)

// The Ascend runtime's values that gohccl passes (acl/acl_rt.h).
const (
	aclMemcpyHostToDevice = 1
	aclMemcpyDeviceToHost = 2
)

// ACLFuncs are the Ascend runtime (AscendCL) entry points gohccl calls,
// with C's types as Go integers: each returns the aclError (0 is
// ACL_SUCCESS). capi fills them from the loaded libascendcl; tests from a
// fake.
type ACLFuncs struct {
	// MemcpyAsync is aclrtMemcpyAsync(dst, destMax, src, count, kind, stream).
	MemcpyAsync func(dst, destMax, src, count uintptr, kind int32, stream uintptr) int32
	// SynchronizeStream is aclrtSynchronizeStream(stream).
	SynchronizeStream func(stream uintptr) int32
	// MallocHost is aclrtMallocHost(&p, n), returning p.
	MallocHost func(n uintptr) (unsafe.Pointer, int32)
	// FreeHost is aclrtFreeHost(p).
	FreeHost func(p unsafe.Pointer) int32
	// GetDevice is aclrtGetDevice(&dev), returning dev; it fails on a
	// thread with no device set.
	GetDevice func() (int32, int32)
	// SetDevice is aclrtSetDevice(dev).
	SetDevice func(dev int32) int32
	// RecentErrMsg is aclGetRecentErrMsg(): the calling thread's latest
	// error message, "" when there is none.
	RecentErrMsg func() string
}

// aclRuntime is Runtime over the Ascend runtime.
type aclRuntime struct{ f ACLFuncs }

// NewACL returns the Runtime that calls f.
func NewACL(f ACLFuncs) Runtime { return &aclRuntime{f} }

func (r *aclRuntime) Name() string { return "ACL" }

func (r *aclRuntime) fail(call string, rc int32) error {
	return &Error{Call: call, Code: int(rc), Detail: r.f.RecentErrMsg()}
}

// SetDevice calls aclrtSetDevice only when the thread's device differs:
// each call takes a reference on the device's resources, which only
// aclrtResetDevice gives back.
func (r *aclRuntime) SetDevice(dev int) (int, error) {
	cur, rc := r.f.GetDevice()
	if rc != 0 {
		cur = -1 // no device on this thread yet
	}
	if int(cur) == dev {
		return dev, nil
	}
	if rc := r.f.SetDevice(int32(dev)); rc != 0 {
		return int(cur), fmt.Errorf("setting device %d: %w", dev, r.fail("aclrtSetDevice", rc))
	}
	return int(cur), nil
}

func (r *aclRuntime) CopyToHost(dst []byte, src Ptr, s Stream) error {
	if err := checkLen("aclrtMemcpyAsync", len(dst)); err != nil {
		return err
	}
	n := uintptr(len(dst))
	if rc := r.f.MemcpyAsync(hostAddr(dst), n, uintptr(src), n, aclMemcpyDeviceToHost, uintptr(s)); rc != 0 {
		return r.fail("aclrtMemcpyAsync", rc)
	}
	return nil
}

func (r *aclRuntime) CopyToDevice(dst Ptr, src []byte, s Stream) error {
	if err := checkLen("aclrtMemcpyAsync", len(src)); err != nil {
		return err
	}
	n := uintptr(len(src))
	if rc := r.f.MemcpyAsync(uintptr(dst), n, hostAddr(src), n, aclMemcpyHostToDevice, uintptr(s)); rc != 0 {
		return r.fail("aclrtMemcpyAsync", rc)
	}
	return nil
}

func (r *aclRuntime) Synchronize(s Stream) error {
	if rc := r.f.SynchronizeStream(uintptr(s)); rc != 0 {
		return r.fail("aclrtSynchronizeStream", rc)
	}
	return nil
}

func (r *aclRuntime) AllocHost(n int) ([]byte, error) {
	if err := checkLen("aclrtMallocHost", n); err != nil {
		return nil, err
	}
	p, rc := r.f.MallocHost(uintptr(n))
	if rc != 0 {
		return nil, fmt.Errorf("allocating %d bytes of pinned memory: %w", n, r.fail("aclrtMallocHost", rc))
	}
	return unsafe.Slice((*byte)(p), n), nil
}

func (r *aclRuntime) FreeHost(b []byte) error {
	if rc := r.f.FreeHost(unsafe.Pointer(unsafe.SliceData(b))); rc != 0 {
		return r.fail("aclrtFreeHost", rc)
	}
	return nil
}
