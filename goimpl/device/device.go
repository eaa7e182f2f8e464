// Package device is gohccl's hand-off to accelerator runtimes: the few calls
// the staging pipeline (goimpl/stage) needs to move a device buffer through
// pinned host memory, behind one small interface, with implementations for
// the CUDA runtime (libcudart) and the Ascend runtime (libascendcl).
//
// Neither runtime is linked: capi/ loads the library with dlopen the first
// time a call passes device memory and hands this package the entry points
// as Go function values (CUDAFuncs, ACLFuncs), so gohccl builds without
// either SDK, only capi/ imports "C", and a process that passes host memory
// only never loads one. Tests hand in fakes of the same shape
// (devicetest).
//
// Device memory is an address (Ptr) that Go never dereferences; pinned host
// memory is a byte slice over memory the runtime allocated. Every call runs
// on the calling thread: a runtime's current device is per thread.
package device

import (
	"errors"
	"fmt"
	"unsafe"
)

// Kind says where a buffer lives. The values are the C ABI's
// gohccl_memory (capi/include/gohccl.h).
type Kind uint8

// Memory kinds.
const (
	// Host is ordinary CPU memory: no staging.
	Host Kind = iota
	// CUDA is a CUDA device's memory (cudaMalloc, torch "cuda" tensors).
	CUDA
	// ACL is an Ascend NPU's memory (aclrtMalloc, torch_npu "npu" tensors).
	ACL
)

func (k Kind) String() string {
	switch k {
	case Host:
		return "host"
	case CUDA:
		return "CUDA"
	case ACL:
		return "ACL"
	}
	return fmt.Sprintf("memory kind %d", uint8(k))
}

// Valid reports whether k is one of the kinds above.
func (k Kind) Valid() bool { return k <= ACL }

// Ptr is an address in device memory. Go never dereferences it: only the
// runtime's copies read or write through it.
type Ptr uintptr

// Add returns p advanced by n bytes.
func (p Ptr) Add(n int) Ptr { return p + Ptr(n) }

// Stream is a runtime's stream handle (cudaStream_t, aclrtStream) as an
// integer; 0 is the runtime's default stream.
type Stream uintptr

// Runtime is what the staging pipeline asks of an accelerator runtime. The
// copies are asynchronous: they are queued on a stream behind the work
// already queued there and run in issue order; Synchronize waits for all of
// it. Host sides are pinned memory from AllocHost.
type Runtime interface {
	// Name names the runtime in messages ("CUDA", "ACL").
	Name() string
	// SetDevice makes dev the calling thread's current device and returns
	// the one it replaced (-1 when the thread had none), for the caller to
	// put back.
	SetDevice(dev int) (prev int, err error)
	// CopyToHost queues a copy of len(dst) bytes from device address src
	// into dst on stream s.
	CopyToHost(dst []byte, src Ptr, s Stream) error
	// CopyToDevice queues a copy of src to device address dst on stream s.
	CopyToDevice(dst Ptr, src []byte, s Stream) error
	// Synchronize returns once everything queued on s has run; it reports
	// a failure of any of it.
	Synchronize(s Stream) error
	// AllocHost allocates n bytes of pinned (page-locked) host memory,
	// which asynchronous copies need; FreeHost frees it.
	AllocHost(n int) ([]byte, error)
	FreeHost(b []byte) error
}

// ErrRuntime is what every runtime error wraps (errors.Is): a failed call,
// or a runtime that cannot be loaded.
var ErrRuntime = errors.New("accelerator runtime error")

// Error is a failed runtime call: the call's name, the code it returned and
// the runtime's own description of it (cudaGetErrorString,
// aclGetRecentErrMsg), which may be empty.
type Error struct {
	Call   string
	Code   int
	Detail string
}

func (e *Error) Error() string {
	if e.Detail == "" {
		return fmt.Sprintf("%s returned %d", e.Call, e.Code)
	}
	return fmt.Sprintf("%s returned %d (%s)", e.Call, e.Code, e.Detail)
}

// Is makes errors.Is(err, ErrRuntime) true for every runtime error.
func (e *Error) Is(target error) bool { return target == ErrRuntime }

// hostAddr is the address of b's first byte, for a runtime call. The
// memory is the runtime's (AllocHost), never Go's heap.
func hostAddr(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }

// checkLen refuses an empty copy or allocation before it reaches the
// runtime: the pipeline never asks for one, and an empty slice has no
// address to pass.
func checkLen(call string, n int) error {
	if n <= 0 {
		return fmt.Errorf("%s of %d bytes: nothing to do (a bug in the caller)", call, n)
	}
	return nil
}
