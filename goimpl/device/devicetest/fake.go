// Package devicetest is a fake accelerator for the Go tests of the device
// staging: the CUDA and Ascend runtime entry points (device.CUDAFuncs,
// device.ACLFuncs) over a device memory of its own, with the checks, byte
// counters, error injection and copy delay of the C doubles that the C ABI
// tests load in place of libcudart and libascendcl (capi/test/doubles).
//
// Device memory lives in Go slices behind fake addresses that nothing maps,
// so a device pointer that anything but the fake dereferences faults.
// Pinned host memory is mapped outside Go's heap, as a runtime's would be.
// Each stream runs its copies in order on a goroutine of its own, after the
// configured delay, so copies overlap whatever the caller does meanwhile.
// Every call is checked (memcpy kind against where each side lives, sizes
// against the allocations, the stream, the calling thread's device); a
// failed check returns the runtime's error code and counts a violation.
package devicetest

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/gohccl/gohccl/goimpl/device"
)

// Error codes the fake returns, the runtimes' own (driver_types.h,
// acl/acl_base.h and the runtime's error header).
const (
	CUDAErrorInvalidValue          = 1
	CUDAErrorInvalidDevice         = 101
	CUDAErrorInvalidResourceHandle = 400
	CUDAErrorIllegalAddress        = 700
	ACLErrorInvalidParam           = 100000
	ACLErrorRTParamInvalid         = 107000
	ACLErrorRTInvalidDeviceID      = 107001
	ACLErrorRTContextNull          = 107002
	ACLErrorRTDrvInternal          = 507899
)

// deviceBase is where fake device addresses start: far from Go's heap and
// from where Linux puts mappings, so nothing is mapped there.
const deviceBase = 0x5a00_0000_0000

// Devices is how many devices the fake has.
const Devices = 8

// Fake is one fake runtime (CUDA or ACL). Its methods are safe for
// concurrent use.
type Fake struct {
	kind device.Kind

	mu       sync.Mutex
	next     uintptr // next device address
	dev      []*block
	pinned   []*block
	streams  map[uintptr]*stream
	nextS    uintptr
	current  map[int]int32 // thread id -> current device
	inject   map[string]*injection
	calls    map[string]int
	down, up int64 // bytes copied device to host, host to device
	copies   int
	pinnedN  int // live pinned allocations
	viol     []string
	delay    atomic.Int64 // nanoseconds each copy takes besides the copying
	lastMsg  string
}

type block struct {
	addr   uintptr
	mem    []byte
	device int32
}

type injection struct {
	nth  int
	code int32
}

// New returns a fake of the CUDA or the ACL runtime.
func New(kind device.Kind) *Fake {
	if kind != device.CUDA && kind != device.ACL {
		panic("devicetest: a fake is CUDA or ACL")
	}
	f := &Fake{kind: kind, next: deviceBase, streams: map[uintptr]*stream{}, nextS: 0x100,
		current: map[int]int32{}, inject: map[string]*injection{}, calls: map[string]int{}}
	f.streams[0] = newStream(0, -1, &f.delay) // the default stream, of whichever device calls
	return f
}

// Runtime returns the device.Runtime over this fake's entry points.
func (f *Fake) Runtime() device.Runtime {
	if f.kind == device.CUDA {
		return device.NewCUDA(f.CUDA())
	}
	return device.NewACL(f.ACL())
}

// Malloc allocates n bytes of device memory on dev (cudaMalloc, aclrtMalloc).
func (f *Fake) Malloc(dev int, n int) device.Ptr {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := &block{addr: f.next, mem: make([]byte, n), device: int32(dev)}
	f.next += (uintptr(n) + 4095) &^ 255 // 256-byte aligned, with a gap
	f.next += 4096
	f.dev = append(f.dev, b)
	return device.Ptr(b.addr)
}

// Free frees device memory from Malloc.
func (f *Fake) Free(p device.Ptr) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.dev = slices.DeleteFunc(f.dev, func(b *block) bool { return b.addr == uintptr(p) })
}

// Write and Read copy between device memory and Go memory at once, as
// cudaMemcpy does: for tests to fill inputs and read results.
func (f *Fake) Write(p device.Ptr, src []byte) {
	f.mu.Lock()
	defer f.mu.Unlock()
	copy(f.mustFind(f.dev, uintptr(p), len(src)), src)
}

// Read returns a copy of n bytes of device memory at p.
func (f *Fake) Read(p device.Ptr, n int) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.mustFind(f.dev, uintptr(p), n))
}

func (f *Fake) mustFind(blocks []*block, addr uintptr, n int) []byte {
	b, ok := find(blocks, addr, n)
	if !ok {
		panic(fmt.Sprintf("devicetest: %d bytes at %#x are not in one allocation", n, addr))
	}
	return b
}

// find returns the n bytes at addr if they lie in one of blocks.
func find(blocks []*block, addr uintptr, n int) ([]byte, bool) {
	for _, b := range blocks {
		if addr >= b.addr && addr+uintptr(n) <= b.addr+uintptr(len(b.mem)) {
			off := addr - b.addr
			return b.mem[off : off+uintptr(n)], true
		}
	}
	return nil, false
}

func (f *Fake) deviceOf(addr uintptr) int32 {
	for _, b := range f.dev {
		if addr >= b.addr && addr < b.addr+uintptr(len(b.mem)) {
			return b.device
		}
	}
	return -1
}

// NewStream creates a stream on dev (cudaStreamCreate, aclrtCreateStream).
func (f *Fake) NewStream(dev int) device.Stream {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.nextS += 0x10
	f.streams[f.nextS] = newStream(f.nextS, int32(dev), &f.delay)
	return device.Stream(f.nextS)
}

// SetDelay makes every later copy take d on its stream, besides the
// copying itself: a slow PCIe link, so that overlap shows.
func (f *Fake) SetDelay(d time.Duration) {
	f.delay.Store(int64(d))
}

// Inject makes the nth call of the named entry point from now on (1 is the
// next) return code, e.g. Inject("aclrtMemcpyAsync", 3, 507899).
func (f *Fake) Inject(call string, nth int, code int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inject[call] = &injection{nth: nth, code: code}
}

// Counters is what the fake has seen.
type Counters struct {
	// Down and Up are the bytes copied device to host and host to device.
	Down, Up int64
	// Copies is the number of asynchronous copies that ran.
	Copies int
	// LivePinned is pinned host allocations not yet freed.
	LivePinned int
	// Pending is copies queued and not yet run.
	Pending int
	// Calls counts each entry point's calls.
	Calls map[string]int
	// Violations lists every call the checks refused.
	Violations []string
}

// Counters returns a snapshot of the counters.
func (f *Fake) Counters() Counters {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := Counters{Down: f.down, Up: f.up, Copies: f.copies, LivePinned: f.pinnedN,
		Calls: map[string]int{}, Violations: slices.Clone(f.viol)}
	for k, v := range f.calls {
		c.Calls[k] = v
	}
	for _, s := range f.streams {
		c.Pending += s.pending()
	}
	return c
}

// Reset zeroes the byte and call counters and forgets violations.
func (f *Fake) Reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down, f.up, f.copies = 0, 0, 0
	f.viol = nil
	f.calls = map[string]int{}
}

// enter counts a call and returns an injected code for it, or 0. The
// caller holds f.mu.
func (f *Fake) enter(call string) int32 {
	f.calls[call]++
	if in := f.inject[call]; in != nil {
		in.nth--
		if in.nth == 0 {
			delete(f.inject, call)
			f.lastMsg = fmt.Sprintf("fake %s: injected error %d", call, in.code)
			return in.code
		}
	}
	return 0
}

// refuse records a failed check and returns code. The caller holds f.mu.
func (f *Fake) refuse(code int32, format string, args ...any) int32 {
	msg := fmt.Sprintf(format, args...)
	f.viol = append(f.viol, msg)
	f.lastMsg = msg
	return code
}

func (f *Fake) code(cuda, acl int32) int32 {
	if f.kind == device.CUDA {
		return cuda
	}
	return acl
}

// thread returns the calling thread's current device, or -1. The caller
// holds f.mu.
func (f *Fake) thread() int32 {
	if d, ok := f.current[syscall.Gettid()]; ok {
		return d
	}
	if f.kind == device.CUDA {
		return 0 // CUDA threads start on device 0
	}
	return -1
}

func (f *Fake) getDevice(call string) (int32, int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rc := f.enter(call); rc != 0 {
		return 0, rc
	}
	d := f.thread()
	if d < 0 {
		f.lastMsg = "no device set on this thread"
		return 0, ACLErrorRTContextNull
	}
	return d, 0
}

func (f *Fake) setDevice(call string, d int32) int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rc := f.enter(call); rc != 0 {
		return rc
	}
	if d < 0 || d >= Devices {
		return f.refuse(f.code(CUDAErrorInvalidDevice, ACLErrorRTInvalidDeviceID), "%s(%d): no such device", call, d)
	}
	f.current[syscall.Gettid()] = d
	return 0
}

// memcpy checks and queues one asynchronous copy.
func (f *Fake) memcpy(call string, dst, destMax, src, n uintptr, kind int32, s uintptr) int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rc := f.enter(call); rc != 0 {
		return rc
	}
	bad := f.code(CUDAErrorInvalidValue, ACLErrorRTParamInvalid)
	if n == 0 || destMax < n {
		return f.refuse(bad, "%s: count %d, destination room %d", call, n, destMax)
	}
	cur := f.thread()
	if cur < 0 {
		return f.refuse(ACLErrorRTContextNull, "%s on a thread with no device set", call)
	}
	st := f.streams[s]
	if st == nil {
		return f.refuse(f.code(CUDAErrorInvalidResourceHandle, ACLErrorRTParamInvalid), "%s: unknown stream %#x", call, s)
	}
	if st.device >= 0 && st.device != cur {
		return f.refuse(f.code(CUDAErrorInvalidResourceHandle, ACLErrorRTParamInvalid),
			"%s: stream of device %d used on a thread of device %d", call, st.device, cur)
	}
	var devAddr, hostAddr uintptr
	switch kind {
	case 2: // device to host
		devAddr, hostAddr = src, dst
	case 1: // host to device
		devAddr, hostAddr = dst, src
	default:
		return f.refuse(bad, "%s: kind %d (gohccl copies only host to device, 1, and device to host, 2)", call, kind)
	}
	dm, ok := find(f.dev, devAddr, int(n))
	if !ok {
		return f.refuse(f.code(CUDAErrorIllegalAddress, ACLErrorRTParamInvalid), "%s kind %d: %d bytes at %#x are not device memory", call, kind, n, devAddr)
	}
	if d := f.deviceOf(devAddr); d != cur {
		return f.refuse(bad, "%s: memory of device %d copied on a thread of device %d", call, d, cur)
	}
	hm, ok := find(f.pinned, hostAddr, int(n))
	if !ok {
		return f.refuse(bad, "%s kind %d: %d bytes at %#x are not pinned host memory", call, kind, n, hostAddr)
	}
	copyTo, copyFrom := hm, dm
	if kind == 1 {
		copyTo, copyFrom = dm, hm
		f.up += int64(n)
	} else {
		f.down += int64(n)
	}
	f.copies++
	st.push(task{to: copyTo, from: copyFrom})
	return 0
}

func (f *Fake) synchronize(call string, s uintptr) int32 {
	f.mu.Lock()
	rc := f.enter(call)
	st := f.streams[s]
	if rc == 0 && st == nil {
		rc = f.refuse(f.code(CUDAErrorInvalidResourceHandle, ACLErrorRTParamInvalid), "%s: unknown stream %#x", call, s)
	}
	f.mu.Unlock()
	if rc != 0 {
		return rc
	}
	st.wait()
	return 0
}

func (f *Fake) mallocHost(call string, n uintptr) (unsafe.Pointer, int32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rc := f.enter(call); rc != 0 {
		return nil, rc
	}
	if n == 0 {
		return nil, f.refuse(f.code(CUDAErrorInvalidValue, ACLErrorInvalidParam), "%s of 0 bytes", call)
	}
	mem, err := syscall.Mmap(-1, 0, int(n), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, f.refuse(2, "%s: %v", call, err)
	}
	p := unsafe.Pointer(&mem[0])
	f.pinned = append(f.pinned, &block{addr: uintptr(p), mem: mem})
	f.pinnedN++
	return p, 0
}

func (f *Fake) freeHost(call string, p unsafe.Pointer) int32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rc := f.enter(call); rc != 0 {
		return rc
	}
	i := slices.IndexFunc(f.pinned, func(b *block) bool { return b.addr == uintptr(p) })
	if i < 0 {
		return f.refuse(f.code(CUDAErrorInvalidValue, ACLErrorInvalidParam), "%s(%p): not a pinned allocation", call, p)
	}
	for _, st := range f.streams {
		if st.pending() > 0 {
			f.viol = append(f.viol, fmt.Sprintf("%s while copies are queued", call))
		}
	}
	_ = syscall.Munmap(f.pinned[i].mem)
	f.pinned = slices.Delete(f.pinned, i, i+1)
	f.pinnedN--
	return 0
}

func (f *Fake) message() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastMsg
}

// CUDA returns the fake's CUDA runtime entry points.
func (f *Fake) CUDA() device.CUDAFuncs {
	return device.CUDAFuncs{
		MemcpyAsync: func(dst, src, n uintptr, kind int32, s uintptr) int32 {
			return f.memcpy("cudaMemcpyAsync", dst, n, src, n, kind, s)
		},
		StreamSynchronize: func(s uintptr) int32 { return f.synchronize("cudaStreamSynchronize", s) },
		HostAlloc: func(n uintptr, flags uint32) (unsafe.Pointer, int32) {
			return f.mallocHost("cudaHostAlloc", n)
		},
		FreeHost:    func(p unsafe.Pointer) int32 { return f.freeHost("cudaFreeHost", p) },
		GetDevice:   func() (int32, int32) { return f.getDevice("cudaGetDevice") },
		SetDevice:   func(d int32) int32 { return f.setDevice("cudaSetDevice", d) },
		ErrorString: func(code int32) string { return fmt.Sprintf("fake CUDA error %d", code) },
	}
}

// ACL returns the fake's Ascend runtime entry points.
func (f *Fake) ACL() device.ACLFuncs {
	return device.ACLFuncs{
		MemcpyAsync: func(dst, destMax, src, n uintptr, kind int32, s uintptr) int32 {
			return f.memcpy("aclrtMemcpyAsync", dst, destMax, src, n, kind, s)
		},
		SynchronizeStream: func(s uintptr) int32 { return f.synchronize("aclrtSynchronizeStream", s) },
		MallocHost:        func(n uintptr) (unsafe.Pointer, int32) { return f.mallocHost("aclrtMallocHost", n) },
		FreeHost:          func(p unsafe.Pointer) int32 { return f.freeHost("aclrtFreeHost", p) },
		GetDevice:         func() (int32, int32) { return f.getDevice("aclrtGetDevice") },
		SetDevice:         func(d int32) int32 { return f.setDevice("aclrtSetDevice", d) },
		RecentErrMsg:      f.message,
	}
}

// stream runs its copies in issue order on a goroutine of its own, which
// lives as long as the process: tests make few streams.
type stream struct {
	handle uintptr
	device int32 // -1: the default stream, any device's
	delay  *atomic.Int64
	mu     sync.Mutex
	cond   *sync.Cond
	queue  []task
	head   int
	busy   bool
}

// task is one queued copy.
type task struct{ to, from []byte }

func newStream(h uintptr, dev int32, delay *atomic.Int64) *stream {
	s := &stream{handle: h, device: dev, delay: delay}
	s.cond = sync.NewCond(&s.mu)
	go s.run()
	return s
}

func (s *stream) push(t task) {
	s.mu.Lock()
	s.queue = append(s.queue, t)
	s.busy = true
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *stream) run() {
	s.mu.Lock()
	for {
		for s.head == len(s.queue) {
			s.queue, s.head = s.queue[:0], 0
			s.busy = false
			s.cond.Broadcast()
			s.cond.Wait()
		}
		t := s.queue[s.head]
		s.head++
		s.mu.Unlock()
		if d := time.Duration(s.delay.Load()); d > 0 {
			time.Sleep(d)
		}
		// Without the fake's lock: copies of different streams overlap,
		// as a device's copy engines do. Read and Write wait for a call to
		// return (Synchronize orders them after its copies).
		copy(t.to, t.from)
		s.mu.Lock()
	}
}

func (s *stream) wait() {
	s.mu.Lock()
	for s.busy {
		s.cond.Wait()
	}
	s.mu.Unlock()
}

// pending is how many copies are queued or running.
func (s *stream) pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(s.queue) - s.head
	if s.busy && n == 0 {
		n = 1 // the one running
	}
	return n
}
