// Command capi is libgohccl, the C ABI of gohccl, built with
// `go build -buildmode=c-shared`. It is the only package that imports "C":
// it turns integer handles into communicators, C memory into byte slices for
// the duration of a call, and Go errors into a status code plus a sentence
// written into the caller's buffer. include/gohccl.h documents every
// function.
package main

/*
#include <stdlib.h>
#define GOHCCL_TYPES_ONLY
#include "include/gohccl.h"

static int store_set(const gohccl_store_ops* ops, void* ctx, const char* key,
                     const uint8_t* value, size_t len, char* err, size_t err_len) {
	return ops->set(ctx, key, value, len, err, err_len);
}
static int store_get(const gohccl_store_ops* ops, void* ctx, const char* key,
                     int64_t timeout_ms, uint8_t** value, size_t* len, char* err, size_t err_len) {
	return ops->get(ctx, key, timeout_ms, value, len, err, err_len);
}
static int store_add(const gohccl_store_ops* ops, void* ctx, const char* key,
                     int64_t delta, int64_t* out, char* err, size_t err_len) {
	return ops->add(ctx, key, delta, out, err, err_len);
}
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"time"
	"unsafe"

	"github.com/gohccl/gohccl/goimpl/comm"
	"github.com/gohccl/gohccl/goimpl/config"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/rendezvous"
	"github.com/gohccl/gohccl/goimpl/shm"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// version is the library version reported by gohccl_version.
const version = "0.1.0"

var cVersion = C.CString(version) // static for the life of the process

func main() {}

// handles maps integer handles to communicators and posted receives.
var handles struct {
	sync.Mutex
	next  uint64
	comms map[uint64]*comm.Comm
	reqs  map[uint64]reqEntry
}

type reqEntry struct {
	comm uint64
	req  *comm.RecvRequest
}

func init() {
	handles.comms = map[uint64]*comm.Comm{}
	handles.reqs = map[uint64]reqEntry{}
	// Every operation runs on the C caller's thread.
	shm.SetLockedCallers(true)
}

func lookupComm(h C.gohccl_comm) (*comm.Comm, error) {
	handles.Lock()
	defer handles.Unlock()
	c := handles.comms[uint64(h)]
	if c == nil {
		return nil, fmt.Errorf("%w: no communicator with handle %d (destroyed?)", comm.ErrInvalid, uint64(h))
	}
	return c, nil
}

// status classifies err into the header's codes.
func status(err error) C.gohccl_status {
	switch {
	case err == nil:
		return C.GOHCCL_OK
	case errors.Is(err, errConfig), errors.Is(err, comm.ErrSettings):
		return C.GOHCCL_ERR_CONFIG
	case errors.Is(err, comm.ErrInvalid):
		return C.GOHCCL_ERR_INVALID
	case errors.Is(err, comm.ErrBroken):
		return C.GOHCCL_ERR_BROKEN
	case errors.Is(err, comm.ErrBootstrap):
		return C.GOHCCL_ERR_BOOTSTRAP
	case errors.Is(err, transport.ErrMismatch), errors.Is(err, transport.ErrSize):
		return C.GOHCCL_ERR_MISMATCH
	case errors.Is(err, transport.ErrTimeout):
		return C.GOHCCL_ERR_TIMEOUT
	case errors.Is(err, transport.ErrPeerLost), errors.Is(err, transport.ErrProtocol):
		return C.GOHCCL_ERR_PEER
	case errors.Is(err, transport.ErrClosed):
		return C.GOHCCL_ERR_CLOSED
	}
	return C.GOHCCL_ERR_INTERNAL
}

var errConfig = errors.New("configuration error")

// finish writes err's sentence into the caller's buffer and returns its code.
func finish(err error, buf *C.char, n C.size_t) C.gohccl_status {
	if err != nil {
		writeString(buf, n, err.Error())
	}
	return status(err)
}

func writeString(buf *C.char, n C.size_t, s string) {
	if buf == nil || n == 0 {
		return
	}
	dst := unsafe.Slice((*byte)(unsafe.Pointer(buf)), int(n))
	k := copy(dst[:len(dst)-1], s)
	dst[k] = 0
}

// guard turns a panic in an exported function into GOHCCL_ERR_INTERNAL with
// the panic's message, so a bug fails one call instead of the process.
func guard(st *C.gohccl_status, buf *C.char, n C.size_t) {
	if p := recover(); p != nil {
		*st = finish(fmt.Errorf("internal error (please report): %v\n%s", p, debug.Stack()), buf, n)
	}
}

// bytesOf views count elements of dt at p as a byte slice for this call.
func bytesOf(p unsafe.Pointer, count C.uint64_t, dt C.gohccl_dtype) ([]byte, error) {
	d := reduce.DType(dt)
	if !d.Valid() {
		return nil, fmt.Errorf("%w: unknown dtype %d", comm.ErrInvalid, int(dt))
	}
	n := uint64(count) * uint64(d.Size())
	if n == 0 {
		return []byte{}, nil
	}
	if p == nil {
		return nil, fmt.Errorf("%w: NULL buffer for %d %s elements", comm.ErrInvalid, uint64(count), d)
	}
	if n > 1<<50 {
		return nil, fmt.Errorf("%w: %d elements is implausibly large", comm.ErrInvalid, uint64(count))
	}
	return unsafe.Slice((*byte)(p), int(n)), nil
}

func timeout(ms C.int64_t) time.Duration {
	if ms <= 0 {
		return 0
	}
	return time.Duration(ms) * time.Millisecond
}

// cEnv reads the process environment as it is now (Go's os.Getenv sees only
// the environment as it was when the library loaded).
func cEnv(name string) (string, bool) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	v := C.getenv(cs)
	if v == nil {
		return "", false
	}
	return C.GoString(v), true
}

// cStore is the Store a caller provides through gohccl_store_ops.
type cStore struct {
	ops *C.gohccl_store_ops
	ctx unsafe.Pointer
}

const errLen = 1024

func (s cStore) Set(key string, value []byte) error {
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var cv unsafe.Pointer
	if len(value) > 0 {
		cv = C.CBytes(value)
		defer C.free(cv)
	}
	var msg [errLen]C.char
	if C.store_set(s.ops, s.ctx, ck, (*C.uint8_t)(cv), C.size_t(len(value)), &msg[0], errLen) != 0 {
		return fmt.Errorf("store set %q: %s", key, C.GoString(&msg[0]))
	}
	return nil
}

func (s cStore) Get(key string, timeout time.Duration) ([]byte, error) {
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var v *C.uint8_t
	var n C.size_t
	var msg [errLen]C.char
	if C.store_get(s.ops, s.ctx, ck, C.int64_t(max(timeout.Milliseconds(), 1)), &v, &n, &msg[0], errLen) != 0 {
		return nil, fmt.Errorf("store get %q: %s", key, C.GoString(&msg[0]))
	}
	defer C.free(unsafe.Pointer(v))
	return C.GoBytes(unsafe.Pointer(v), C.int(n)), nil
}

func (s cStore) Add(key string, delta int64) (int64, error) {
	ck := C.CString(key)
	defer C.free(unsafe.Pointer(ck))
	var out C.int64_t
	var msg [errLen]C.char
	if C.store_add(s.ops, s.ctx, ck, C.int64_t(delta), &out, &msg[0], errLen) != 0 {
		return 0, fmt.Errorf("store add %q: %s", key, C.GoString(&msg[0]))
	}
	return int64(out), nil
}

var _ rendezvous.Store = cStore{}

//export gohccl_version
func gohccl_version() *C.char { return cVersion }

//export gohccl_abi_version
func gohccl_abi_version() C.int { return C.GOHCCL_ABI_VERSION }

// gohccl_dtype_info describes element type code from Go's own table
// (reduce.DType), so that a test can check the C, C++ and Python lists
// against it.
//
//export gohccl_dtype_info
func gohccl_dtype_info(code C.int, name *C.char, nameLen C.size_t, size *C.int) C.int {
	d := reduce.DType(code)
	if code < 0 || !d.Valid() {
		return 0
	}
	writeString(name, nameLen, d.String())
	if size != nil {
		*size = C.int(d.Size())
	}
	return 1
}

//export gohccl_comm_create
func gohccl_comm_create(ops *C.gohccl_store_ops, ctx unsafe.Pointer, rank, size C.int, timeoutMs C.int64_t,
	out *C.gohccl_comm, errBuf *C.char, errN C.size_t) (st C.gohccl_status) {
	defer guard(&st, errBuf, errN)
	if ops == nil || out == nil || ops.set == nil || ops.get == nil || ops.add == nil {
		return finish(fmt.Errorf("%w: gohccl_comm_create needs store ops with set, get and add, and an output handle", comm.ErrInvalid), errBuf, errN)
	}
	cfg, err := config.Load(cEnv)
	if err != nil {
		return finish(fmt.Errorf("%w: %v", errConfig, err), errBuf, errN)
	}
	master, _ := cEnv("MASTER_ADDR")
	_, userProcs := cEnv("GOMAXPROCS")
	c, err := comm.New(cStore{ops, ctx}, comm.Options{Rank: int(rank), Size: int(size), Timeout: timeout(timeoutMs),
		Config: cfg, MasterAddr: master, CapProcs: !userProcs})
	if err != nil {
		return finish(err, errBuf, errN)
	}
	handles.Lock()
	handles.next++
	h := handles.next
	handles.comms[h] = c
	handles.Unlock()
	*out = C.gohccl_comm(h)
	if cfg.TraceDir != "" {
		if err := traceSignal(); err != nil { // trace.go
			fmt.Fprintf(os.Stderr, "gohccl: %v\n", err)
		}
	}
	return C.GOHCCL_OK
}

//export gohccl_comm_destroy
func gohccl_comm_destroy(h C.gohccl_comm) (st C.gohccl_status) {
	defer guard(&st, nil, 0)
	handles.Lock()
	c := handles.comms[uint64(h)]
	delete(handles.comms, uint64(h))
	for id, e := range handles.reqs {
		if e.comm == uint64(h) {
			delete(handles.reqs, id)
		}
	}
	handles.Unlock()
	if c == nil {
		return C.GOHCCL_ERR_INVALID
	}
	c.Close()
	closeStagers(uint64(h)) // device.go: the pinned buffers of device calls
	return C.GOHCCL_OK
}

//export gohccl_comm_abort
func gohccl_comm_abort(h C.gohccl_comm) (st C.gohccl_status) {
	defer guard(&st, nil, 0)
	c, err := lookupComm(h)
	if err != nil {
		return status(err)
	}
	c.Abort()
	return C.GOHCCL_OK
}

//export gohccl_comm_rank
func gohccl_comm_rank(h C.gohccl_comm) C.int {
	c, err := lookupComm(h)
	if err != nil {
		return -1
	}
	return C.int(c.Rank())
}

//export gohccl_comm_size
func gohccl_comm_size(h C.gohccl_comm) C.int {
	c, err := lookupComm(h)
	if err != nil {
		return -1
	}
	return C.int(c.Size())
}

//export gohccl_comm_describe
func gohccl_comm_describe(h C.gohccl_comm, buf *C.char, n C.size_t) (st C.gohccl_status) {
	defer guard(&st, buf, n)
	c, err := lookupComm(h)
	if err != nil {
		return finish(err, buf, n)
	}
	writeString(buf, n, c.Describe())
	return C.GOHCCL_OK
}
