package main

// The device half of the C ABI: gohccl_run, the loading of the CUDA and
// Ascend runtimes with dlopen, and the C trampolines through which
// goimpl/device calls them. The runtimes' prototypes are declared here
// from their published headers (docs/devices.md), so no SDK is needed to
// build, and nothing is loaded until a call passes device memory.

/*
#cgo LDFLAGS: -ldl
#cgo CFLAGS: -D_GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#define GOHCCL_TYPES_ONLY
#include "include/gohccl.h"

// cudaError_t and aclError are both C ints; streams and events are pointers.
typedef int (*cuda_memcpy_async_fn)(void* dst, const void* src, size_t n, int kind, void* stream);
typedef int (*acl_memcpy_async_fn)(void* dst, size_t dest_max, const void* src, size_t n, int kind, void* stream);
typedef int (*stream_fn)(void* stream);
typedef int (*cuda_host_alloc_fn)(void** p, size_t n, unsigned int flags);
typedef int (*acl_malloc_host_fn)(void** p, size_t n);
typedef int (*free_fn)(void* p);
typedef int (*get_device_fn)(int* dev);
typedef int (*set_device_fn)(int dev);
typedef const char* (*error_string_fn)(int code);
typedef const char* (*recent_msg_fn)(void);

static int cuda_memcpy_async(void* fn, uintptr_t dst, uintptr_t src, size_t n, int kind, uintptr_t stream) {
	return ((cuda_memcpy_async_fn)fn)((void*)dst, (const void*)src, n, kind, (void*)stream);
}
static int acl_memcpy_async(void* fn, uintptr_t dst, size_t dest_max, uintptr_t src, size_t n, int kind, uintptr_t stream) {
	return ((acl_memcpy_async_fn)fn)((void*)dst, dest_max, (const void*)src, n, kind, (void*)stream);
}
static int stream_call(void* fn, uintptr_t stream) { return ((stream_fn)fn)((void*)stream); }
static void* cuda_host_alloc(void* fn, size_t n, unsigned int flags, int* rc) {
	void* p = NULL;
	*rc = ((cuda_host_alloc_fn)fn)(&p, n, flags);
	return p;
}
static void* acl_malloc_host(void* fn, size_t n, int* rc) {
	void* p = NULL;
	*rc = ((acl_malloc_host_fn)fn)(&p, n);
	return p;
}
static int free_call(void* fn, void* p) { return ((free_fn)fn)(p); }
static int get_device(void* fn, int* dev) { return ((get_device_fn)fn)(dev); }
static int set_device(void* fn, int dev) { return ((set_device_fn)fn)(dev); }
static const char* error_string(void* fn, int code) { return ((error_string_fn)fn)(code); }
static const char* recent_msg(void* fn) { return fn == NULL ? NULL : ((recent_msg_fn)fn)(); }

// library_file is the file the loaded object holding sym came from (dladdr).
static const char* library_file(void* sym) {
	Dl_info info;
	if (sym != NULL && dladdr(sym, &info) != 0 && info.dli_fname != NULL) return info.dli_fname;
	return NULL;
}

static void* open_library(const char* path, int noload) {
	return dlopen(path, RTLD_NOW | RTLD_LOCAL | (noload ? RTLD_NOLOAD : 0));
}
*/
import "C"

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"unsafe"

	"github.com/gohccl/gohccl/goimpl/comm"
	"github.com/gohccl/gohccl/goimpl/device"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/stage"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// Where each runtime is looked for when GOHCCL_*_LIBRARY is unset: first a
// copy the process already loaded (torch loads its wheel's libcudart,
// torch_npu libascendcl), so that gohccl shares the caller's runtime and
// its streams; then the loader's search path; then the usual install
// directory.
var searchPaths = map[device.Kind][]string{
	device.CUDA: {"libcudart.so.13", "libcudart.so.12", "/usr/local/cuda/lib64/libcudart.so.13",
		"/usr/local/cuda/lib64/libcudart.so.12", "libcudart.so"},
	device.ACL: {"libascendcl.so", "/usr/local/Ascend/ascend-toolkit/latest/lib64/libascendcl.so"},
}

// runtimes holds each runtime loaded so far, by kind and requested path
// ("" for the default search). A library is never unloaded: the process
// may hold its streams and memory.
var runtimes struct {
	sync.Mutex
	loaded map[runtimeKey]loadedRuntime
}

// loadedRuntime is a runtime and a sentence saying which file it came from
// and how it was found, which GOHCCL_DEBUG=INFO prints at a communicator's
// first device call.
type loadedRuntime struct {
	rt    device.Runtime
	where string
}

type runtimeKey struct {
	kind device.Kind
	path string
}

// loadRuntime returns the runtime of kind, loading it at the first call.
func loadRuntime(kind device.Kind, path string) (loadedRuntime, error) {
	runtimes.Lock()
	defer runtimes.Unlock()
	key := runtimeKey{kind, path}
	if lr, ok := runtimes.loaded[key]; ok {
		return lr, nil
	}
	variable := map[device.Kind]string{device.CUDA: "GOHCCL_CUDA_LIBRARY", device.ACL: "GOHCCL_ACL_LIBRARY"}[kind]
	var h unsafe.Pointer
	var tried []string
	how := variable
	if path != "" {
		h, tried = openLibrary(path, false, tried)
	} else {
		for _, noload := range []bool{true, false} {
			for _, p := range searchPaths[kind] {
				if h, tried = openLibrary(p, noload, tried); h != nil {
					how = "the loader's search path"
					if noload {
						how = "already loaded by the process"
					}
					break
				}
			}
			if h != nil {
				break
			}
		}
	}
	if h == nil {
		return loadedRuntime{}, fmt.Errorf("%w: cannot load the %s runtime (set %s to its library): %s",
			device.ErrRuntime, kind, variable, strings.Join(tried, "; "))
	}
	rt, file, err := bind(kind, h)
	if err != nil {
		return loadedRuntime{}, fmt.Errorf("%w: %s (%s): %v", device.ErrRuntime, variable, libraryName(path, kind), err)
	}
	if runtimes.loaded == nil {
		runtimes.loaded = map[runtimeKey]loadedRuntime{}
	}
	lr := loadedRuntime{rt, fmt.Sprintf("%s (%s)", file, how)}
	runtimes.loaded[key] = lr
	return lr, nil
}

func libraryName(path string, kind device.Kind) string {
	if path != "" {
		return path
	}
	return "default search for " + kind.String()
}

// openLibrary dlopens path (only if already loaded, when noload) and adds
// what failed to tried.
func openLibrary(path string, noload bool, tried []string) (unsafe.Pointer, []string) {
	cp := C.CString(path)
	defer C.free(unsafe.Pointer(cp))
	var nl C.int
	if noload {
		nl = 1
	}
	h := C.open_library(cp, nl)
	if h == nil && !noload {
		msg := "not found"
		if e := C.dlerror(); e != nil {
			msg = C.GoString(e)
		}
		tried = append(tried, msg)
	}
	return h, tried
}

// bind looks up the entry points gohccl calls and wraps them; file is the
// library they came from.
func bind(kind device.Kind, h unsafe.Pointer) (rt device.Runtime, file string, err error) {
	var missing []string
	sym := func(name string, optional bool) unsafe.Pointer {
		cn := C.CString(name)
		defer C.free(unsafe.Pointer(cn))
		p := C.dlsym(h, cn)
		if p == nil && !optional {
			missing = append(missing, name)
		}
		return p
	}
	if kind == device.CUDA {
		memcpy, sync := sym("cudaMemcpyAsync", false), sym("cudaStreamSynchronize", false)
		alloc, free := sym("cudaHostAlloc", false), sym("cudaFreeHost", false)
		getDev, setDev := sym("cudaGetDevice", false), sym("cudaSetDevice", false)
		errStr := sym("cudaGetErrorString", false)
		if len(missing) > 0 {
			return nil, "", fmt.Errorf("the library lacks %s", strings.Join(missing, ", "))
		}
		return device.NewCUDA(device.CUDAFuncs{
			MemcpyAsync: func(dst, src, n uintptr, kind int32, s uintptr) int32 {
				return int32(C.cuda_memcpy_async(memcpy, C.uintptr_t(dst), C.uintptr_t(src), C.size_t(n), C.int(kind), C.uintptr_t(s)))
			},
			StreamSynchronize: func(s uintptr) int32 { return int32(C.stream_call(sync, C.uintptr_t(s))) },
			HostAlloc: func(n uintptr, flags uint32) (unsafe.Pointer, int32) {
				var rc C.int
				p := C.cuda_host_alloc(alloc, C.size_t(n), C.uint(flags), &rc)
				return p, int32(rc)
			},
			FreeHost: func(p unsafe.Pointer) int32 { return int32(C.free_call(free, p)) },
			GetDevice: func() (int32, int32) {
				var d C.int
				rc := C.get_device(getDev, &d)
				return int32(d), int32(rc)
			},
			SetDevice:   func(d int32) int32 { return int32(C.set_device(setDev, C.int(d))) },
			ErrorString: func(code int32) string { return goString(C.error_string(errStr, C.int(code))) },
		}), goString(C.library_file(memcpy)), nil
	}
	memcpy, sync := sym("aclrtMemcpyAsync", false), sym("aclrtSynchronizeStream", false)
	alloc, free := sym("aclrtMallocHost", false), sym("aclrtFreeHost", false)
	getDev, setDev := sym("aclrtGetDevice", false), sym("aclrtSetDevice", false)
	recent := sym("aclGetRecentErrMsg", true) // absent before CANN 6
	if len(missing) > 0 {
		return nil, "", fmt.Errorf("the library lacks %s", strings.Join(missing, ", "))
	}
	return device.NewACL(device.ACLFuncs{
		MemcpyAsync: func(dst, destMax, src, n uintptr, kind int32, s uintptr) int32 {
			return int32(C.acl_memcpy_async(memcpy, C.uintptr_t(dst), C.size_t(destMax), C.uintptr_t(src), C.size_t(n), C.int(kind), C.uintptr_t(s)))
		},
		SynchronizeStream: func(s uintptr) int32 { return int32(C.stream_call(sync, C.uintptr_t(s))) },
		MallocHost: func(n uintptr) (unsafe.Pointer, int32) {
			var rc C.int
			p := C.acl_malloc_host(alloc, C.size_t(n), &rc)
			return p, int32(rc)
		},
		FreeHost: func(p unsafe.Pointer) int32 { return int32(C.free_call(free, p)) },
		GetDevice: func() (int32, int32) {
			var d C.int
			rc := C.get_device(getDev, &d)
			return int32(d), int32(rc)
		},
		SetDevice:    func(d int32) int32 { return int32(C.set_device(setDev, C.int(d))) },
		RecentErrMsg: func() string { return goString(C.recent_msg(recent)) },
	}), goString(C.library_file(memcpy)), nil
}

func goString(s *C.char) string {
	if s == nil {
		return ""
	}
	return C.GoString(s)
}

// stagers holds each communicator's Stagers per memory kind and role, made
// at its first device call of that role and closed by gohccl_comm_destroy.
var stagers struct {
	sync.Mutex
	m map[stagerKey]*stage.Stager
}

type stagerKey struct {
	comm uint64
	kind device.Kind
	role stagerRole
}

// stagerRole: a communicator stages its collectives, its sends and its
// receives through three Stagers, each with its own pinned buffer. A Stager
// runs one call at a time, and a receive holds its Stager until the whole
// message has arrived; with one Stager for all, two ranks that exchange
// device messages (each an isend and an irecv, torch's usual pair) deadlock:
// each rank's receive holds the slots its send needs, or its multi-chunk
// send holds them against its receive. Seen on a GPU (docs/devices.md).
type stagerRole uint8

const (
	roleCollective stagerRole = iota
	roleSend
	roleRecv
)

func (r stagerRole) String() string { return [...]string{"collectives", "sends", "receives"}[r] }

func roleOf(kind C.gohccl_call_kind) stagerRole {
	switch kind {
	case C.GOHCCL_CALL_SEND:
		return roleSend
	case C.GOHCCL_CALL_RECV:
		return roleRecv
	}
	return roleCollective
}

// stagerFor returns the Stager of communicator h for kind and role, loading
// the runtime first if need be. A runtime that cannot be loaded breaks the
// communicator: its peers are already in the call.
func stagerFor(h C.gohccl_comm, c *comm.Comm, kind device.Kind, role stagerRole) (*stage.Stager, error) {
	stagers.Lock()
	defer stagers.Unlock()
	key := stagerKey{uint64(h), kind, role}
	if s := stagers.m[key]; s != nil {
		return s, nil
	}
	cfg := c.Config()
	path := cfg.CUDALibrary
	if kind == device.ACL {
		path = cfg.ACLLibrary
	}
	lr, err := loadRuntime(kind, path)
	if err != nil {
		err = fmt.Errorf("rank %d: %w", c.Rank(), err)
		c.Fail(err)
		return nil, err
	}
	if stagers.m == nil {
		stagers.m = map[stagerKey]*stage.Stager{}
	}
	comm.NewLogger(cfg.Debug, c.Rank(), c.Size()).Infof("device: %s memory of %s staged through %d pinned bytes (GOHCCL_BUFFSIZE); runtime %s",
		kind, role, cfg.BuffSize, lr.where)
	s := stage.New(c, lr.rt)
	stagers.m[key] = s
	return s, nil
}

// closeStagers frees the pinned buffers of communicator h; its
// communicator is closed, so no staged call is left waiting.
func closeStagers(h uint64) {
	stagers.Lock()
	var mine []*stage.Stager
	for key, s := range stagers.m {
		if key.comm == h {
			mine = append(mine, s)
			delete(stagers.m, key)
		}
	}
	stagers.Unlock()
	for _, s := range mine {
		_ = s.Close() // a failed free leaks pinned memory; nothing better to do at destroy
	}
}

// elems converts a C count to an int, refusing the implausible.
func elems(n C.uint64_t) (int, error) {
	if n > 1<<50 {
		return 0, fmt.Errorf("%w: %d elements is implausibly large", comm.ErrInvalid, uint64(n))
	}
	return int(n), nil
}

//export gohccl_run
func gohccl_run(h C.gohccl_comm, cl *C.gohccl_call, errBuf *C.char, errN C.size_t) (st C.gohccl_status) {
	defer guard(&st, errBuf, errN)
	if cl == nil {
		return finish(fmt.Errorf("%w: gohccl_run needs a call", comm.ErrInvalid), errBuf, errN)
	}
	kind := device.Kind(cl.memory)
	if !kind.Valid() {
		return finish(fmt.Errorf("%w: unknown memory kind %d", comm.ErrInvalid, int(cl.memory)), errBuf, errN)
	}
	inPlace := cl.kind == C.GOHCCL_CALL_ALLREDUCE || cl.kind == C.GOHCCL_CALL_BROADCAST || cl.kind == C.GOHCCL_CALL_REDUCE
	if inPlace && cl.sendbuf != nil && cl.sendbuf != unsafe.Pointer(cl.recvbuf) {
		return finish(fmt.Errorf("%w: allreduce, broadcast and reduce work in place on recvbuf; sendbuf must be NULL or recvbuf", comm.ErrInvalid), errBuf, errN)
	}
	if kind == device.Host {
		return runHost(h, cl, errBuf, errN)
	}
	tickScheduler()
	err := func() error {
		c, err := lookupComm(h)
		if err != nil {
			return err
		}
		s, err := stagerFor(h, c, kind, roleOf(cl.kind))
		if err != nil {
			return err
		}
		return runStaged(s, c, cl)
	}()
	if errors.Is(err, device.ErrRuntime) {
		writeString(errBuf, errN, err.Error())
		return C.GOHCCL_ERR_DEVICE
	}
	return finish(err, errBuf, errN)
}

// runHost runs a host-memory call through the functions of the same
// operation, so that both entries behave alike.
func runHost(h C.gohccl_comm, cl *C.gohccl_call, errBuf *C.char, errN C.size_t) C.gohccl_status {
	send := unsafe.Pointer(cl.sendbuf)
	switch cl.kind {
	case C.GOHCCL_CALL_ALLREDUCE:
		return gohccl_allreduce(h, unsafe.Pointer(cl.recvbuf), cl.count, cl.dtype, cl.op, cl.timeout_ms, errBuf, errN)
	case C.GOHCCL_CALL_BROADCAST:
		return gohccl_broadcast(h, unsafe.Pointer(cl.recvbuf), cl.count, cl.dtype, cl.root, cl.timeout_ms, errBuf, errN)
	case C.GOHCCL_CALL_REDUCE:
		return gohccl_reduce(h, unsafe.Pointer(cl.recvbuf), cl.count, cl.dtype, cl.op, cl.root, cl.timeout_ms, errBuf, errN)
	case C.GOHCCL_CALL_ALLGATHER:
		return gohccl_allgather(h, send, unsafe.Pointer(cl.recvbuf), cl.count, cl.dtype, cl.timeout_ms, errBuf, errN)
	case C.GOHCCL_CALL_REDUCE_SCATTER:
		return gohccl_reduce_scatter(h, send, unsafe.Pointer(cl.recvbuf), cl.count, cl.dtype, cl.op, cl.timeout_ms, errBuf, errN)
	case C.GOHCCL_CALL_GATHER:
		return gohccl_gather(h, send, unsafe.Pointer(cl.recvbuf), cl.count, cl.dtype, cl.root, cl.timeout_ms, errBuf, errN)
	case C.GOHCCL_CALL_SCATTER:
		return gohccl_scatter(h, send, unsafe.Pointer(cl.recvbuf), cl.count, cl.dtype, cl.root, cl.timeout_ms, errBuf, errN)
	case C.GOHCCL_CALL_ALLTOALLV:
		return gohccl_alltoallv(h, send, cl.send_counts, cl.send_offsets, unsafe.Pointer(cl.recvbuf),
			cl.recv_counts, cl.recv_offsets, cl.dtype, cl.timeout_ms, errBuf, errN)
	case C.GOHCCL_CALL_BARRIER:
		return gohccl_barrier(h, cl.timeout_ms, errBuf, errN)
	case C.GOHCCL_CALL_SEND:
		return gohccl_send(h, cl.peer, cl.tag, send, cl.count, cl.dtype, cl.timeout_ms, errBuf, errN)
	case C.GOHCCL_CALL_RECV:
		var req C.gohccl_req
		if st := gohccl_recv_post(h, cl.peer, cl.tag, unsafe.Pointer(cl.recvbuf), cl.count, cl.dtype, &req, errBuf, errN); st != C.GOHCCL_OK {
			return st
		}
		var src C.int
		st := gohccl_recv_wait(h, req, cl.timeout_ms, &src, errBuf, errN)
		if st == C.GOHCCL_OK {
			cl.peer = src
		}
		return st
	}
	return finish(fmt.Errorf("%w: unknown call kind %d", comm.ErrInvalid, int(cl.kind)), errBuf, errN)
}

// runStaged runs a device-memory call on its communicator's Stager.
func runStaged(s *stage.Stager, c *comm.Comm, cl *C.gohccl_call) error {
	count, err := elems(cl.count)
	if err != nil {
		return err
	}
	at := stage.Place{Device: int(cl.device), Stream: device.Stream(uintptr(cl.stream))}
	in, out := device.Ptr(uintptr(cl.sendbuf)), device.Ptr(uintptr(unsafe.Pointer(cl.recvbuf)))
	dt, op, root, t := reduce.DType(cl.dtype), reduce.Op(cl.op), int(cl.root), timeout(cl.timeout_ms)
	switch cl.kind {
	case C.GOHCCL_CALL_ALLREDUCE:
		return s.AllReduce(at, out, count, dt, op, t)
	case C.GOHCCL_CALL_BROADCAST:
		return s.Broadcast(at, out, count, dt, root, t)
	case C.GOHCCL_CALL_REDUCE:
		return s.Reduce(at, out, count, dt, op, root, t)
	case C.GOHCCL_CALL_ALLGATHER:
		return s.AllGather(at, in, out, count, dt, t)
	case C.GOHCCL_CALL_REDUCE_SCATTER:
		return s.ReduceScatter(at, in, out, count, dt, op, t)
	case C.GOHCCL_CALL_GATHER:
		return s.Gather(at, in, out, count, dt, root, t)
	case C.GOHCCL_CALL_SCATTER:
		return s.Scatter(at, in, out, count, dt, root, t)
	case C.GOHCCL_CALL_ALLTOALLV:
		sc, so, _, err := splits(cl.send_counts, cl.send_offsets, c.Size())
		if err != nil {
			return err
		}
		rc, ro, _, err := splits(cl.recv_counts, cl.recv_offsets, c.Size())
		if err != nil {
			return err
		}
		return s.AllToAllV(at, in, sc, so, out, rc, ro, dt, t)
	case C.GOHCCL_CALL_BARRIER:
		return s.Barrier(at, t)
	case C.GOHCCL_CALL_SEND:
		return s.Send(at, int(cl.peer), int64(cl.tag), in, count, dt, t)
	case C.GOHCCL_CALL_RECV:
		peer := int(cl.peer)
		if cl.peer == C.GOHCCL_ANY_SOURCE {
			peer = transport.AnySource
		}
		src, err := s.Recv(at, peer, int64(cl.tag), out, count, dt, t)
		if err == nil {
			cl.peer = C.int(src)
		}
		return err
	}
	return fmt.Errorf("%w: unknown call kind %d", comm.ErrInvalid, int(cl.kind))
}
