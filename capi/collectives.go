package main

/*
#define GOHCCL_TYPES_ONLY
#include "include/gohccl.h"
*/
import "C"

import (
	"fmt"
	"unsafe"

	"github.com/gohccl/gohccl/goimpl/comm"
	"github.com/gohccl/gohccl/goimpl/reduce"
	"github.com/gohccl/gohccl/goimpl/transport"
)

// call runs f on the communicator behind h, with the guard and the error
// translation every collective shares.
func call(h C.gohccl_comm, errBuf *C.char, errN C.size_t, f func(c *comm.Comm) error) (st C.gohccl_status) {
	defer guard(&st, errBuf, errN)
	tickScheduler()
	c, err := lookupComm(h)
	if err == nil {
		err = f(c)
	}
	return finish(err, errBuf, errN)
}

//export gohccl_allreduce
func gohccl_allreduce(h C.gohccl_comm, buf unsafe.Pointer, count C.uint64_t, dt C.gohccl_dtype, op C.gohccl_redop,
	timeoutMs C.int64_t, errBuf *C.char, errN C.size_t) C.gohccl_status {
	return call(h, errBuf, errN, func(c *comm.Comm) error {
		b, err := bytesOf(buf, count, dt)
		if err != nil {
			return err
		}
		return c.AllReduce(b, int(count), reduce.DType(dt), reduce.Op(op), timeout(timeoutMs))
	})
}

//export gohccl_broadcast
func gohccl_broadcast(h C.gohccl_comm, buf unsafe.Pointer, count C.uint64_t, dt C.gohccl_dtype, root C.int,
	timeoutMs C.int64_t, errBuf *C.char, errN C.size_t) C.gohccl_status {
	return call(h, errBuf, errN, func(c *comm.Comm) error {
		b, err := bytesOf(buf, count, dt)
		if err != nil {
			return err
		}
		return c.Broadcast(b, int(count), reduce.DType(dt), int(root), timeout(timeoutMs))
	})
}

//export gohccl_reduce
func gohccl_reduce(h C.gohccl_comm, buf unsafe.Pointer, count C.uint64_t, dt C.gohccl_dtype, op C.gohccl_redop,
	root C.int, timeoutMs C.int64_t, errBuf *C.char, errN C.size_t) C.gohccl_status {
	return call(h, errBuf, errN, func(c *comm.Comm) error {
		b, err := bytesOf(buf, count, dt)
		if err != nil {
			return err
		}
		return c.Reduce(b, int(count), reduce.DType(dt), reduce.Op(op), int(root), timeout(timeoutMs))
	})
}

//export gohccl_allgather
func gohccl_allgather(h C.gohccl_comm, send, recv unsafe.Pointer, count C.uint64_t, dt C.gohccl_dtype,
	timeoutMs C.int64_t, errBuf *C.char, errN C.size_t) C.gohccl_status {
	return call(h, errBuf, errN, func(c *comm.Comm) error {
		in, err := bytesOf(send, count, dt)
		if err != nil {
			return err
		}
		out, err := bytesOf(recv, count*C.uint64_t(c.Size()), dt)
		if err != nil {
			return err
		}
		return c.AllGather(in, out, int(count), reduce.DType(dt), timeout(timeoutMs))
	})
}

//export gohccl_reduce_scatter
func gohccl_reduce_scatter(h C.gohccl_comm, send, recv unsafe.Pointer, count C.uint64_t, dt C.gohccl_dtype,
	op C.gohccl_redop, timeoutMs C.int64_t, errBuf *C.char, errN C.size_t) C.gohccl_status {
	return call(h, errBuf, errN, func(c *comm.Comm) error {
		in, err := bytesOf(send, count*C.uint64_t(c.Size()), dt)
		if err != nil {
			return err
		}
		out, err := bytesOf(recv, count, dt)
		if err != nil {
			return err
		}
		return c.ReduceScatter(in, out, int(count), reduce.DType(dt), reduce.Op(op), timeout(timeoutMs))
	})
}

// rootBytes views a buffer that only root needs; elsewhere it may be NULL.
func rootBytes(c *comm.Comm, root C.int, p unsafe.Pointer, count C.uint64_t, dt C.gohccl_dtype) ([]byte, error) {
	if int(root) != c.Rank() {
		return nil, nil
	}
	return bytesOf(p, count*C.uint64_t(c.Size()), dt)
}

//export gohccl_gather
func gohccl_gather(h C.gohccl_comm, send, recv unsafe.Pointer, count C.uint64_t, dt C.gohccl_dtype, root C.int,
	timeoutMs C.int64_t, errBuf *C.char, errN C.size_t) C.gohccl_status {
	return call(h, errBuf, errN, func(c *comm.Comm) error {
		in, err := bytesOf(send, count, dt)
		if err != nil {
			return err
		}
		out, err := rootBytes(c, root, recv, count, dt)
		if err != nil {
			return err
		}
		return c.Gather(in, out, int(count), reduce.DType(dt), int(root), timeout(timeoutMs))
	})
}

//export gohccl_scatter
func gohccl_scatter(h C.gohccl_comm, send, recv unsafe.Pointer, count C.uint64_t, dt C.gohccl_dtype, root C.int,
	timeoutMs C.int64_t, errBuf *C.char, errN C.size_t) C.gohccl_status {
	return call(h, errBuf, errN, func(c *comm.Comm) error {
		in, err := rootBytes(c, root, send, count, dt)
		if err != nil {
			return err
		}
		out, err := bytesOf(recv, count, dt)
		if err != nil {
			return err
		}
		return c.Scatter(in, out, int(count), reduce.DType(dt), int(root), timeout(timeoutMs))
	})
}

// splits copies a C array of size counts or offsets, and the extent in
// elements (largest offset+count) the buffer must cover.
func splits(counts, offsets *C.uint64_t, size int) (cs, os []int, extent int, err error) {
	if size > 0 && (counts == nil || offsets == nil) {
		return nil, nil, 0, fmt.Errorf("%w: alltoallv needs count and offset arrays", comm.ErrInvalid)
	}
	cc := unsafe.Slice(counts, size)
	oc := unsafe.Slice(offsets, size)
	cs, os = make([]int, size), make([]int, size)
	for p := 0; p < size; p++ {
		if cc[p] > 1<<50 || oc[p] > 1<<50 {
			return nil, nil, 0, fmt.Errorf("%w: alltoallv count or offset for rank %d is implausibly large", comm.ErrInvalid, p)
		}
		cs[p], os[p] = int(cc[p]), int(oc[p])
		extent = max(extent, os[p]+cs[p])
	}
	return cs, os, extent, nil
}

//export gohccl_alltoallv
func gohccl_alltoallv(h C.gohccl_comm, send unsafe.Pointer, sendCounts, sendOffsets *C.uint64_t,
	recv unsafe.Pointer, recvCounts, recvOffsets *C.uint64_t, dt C.gohccl_dtype,
	timeoutMs C.int64_t, errBuf *C.char, errN C.size_t) C.gohccl_status {
	return call(h, errBuf, errN, func(c *comm.Comm) error {
		sc, so, sext, err := splits(sendCounts, sendOffsets, c.Size())
		if err != nil {
			return err
		}
		rc, ro, rext, err := splits(recvCounts, recvOffsets, c.Size())
		if err != nil {
			return err
		}
		in, err := bytesOf(send, C.uint64_t(sext), dt)
		if err != nil {
			return err
		}
		out, err := bytesOf(recv, C.uint64_t(rext), dt)
		if err != nil {
			return err
		}
		return c.AllToAllV(in, sc, so, out, rc, ro, reduce.DType(dt), timeout(timeoutMs))
	})
}

//export gohccl_barrier
func gohccl_barrier(h C.gohccl_comm, timeoutMs C.int64_t, errBuf *C.char, errN C.size_t) C.gohccl_status {
	return call(h, errBuf, errN, func(c *comm.Comm) error { return c.Barrier(timeout(timeoutMs)) })
}

//export gohccl_send
func gohccl_send(h C.gohccl_comm, peer C.int, tag C.int64_t, buf unsafe.Pointer, count C.uint64_t, dt C.gohccl_dtype,
	timeoutMs C.int64_t, errBuf *C.char, errN C.size_t) C.gohccl_status {
	return call(h, errBuf, errN, func(c *comm.Comm) error {
		b, err := bytesOf(buf, count, dt)
		if err != nil {
			return err
		}
		return c.Send(int(peer), int64(tag), b, int(count), reduce.DType(dt), timeout(timeoutMs))
	})
}

//export gohccl_recv_post
func gohccl_recv_post(h C.gohccl_comm, peer C.int, tag C.int64_t, buf unsafe.Pointer, count C.uint64_t,
	dt C.gohccl_dtype, out *C.gohccl_req, errBuf *C.char, errN C.size_t) C.gohccl_status {
	return call(h, errBuf, errN, func(c *comm.Comm) error {
		if out == nil {
			return fmt.Errorf("%w: gohccl_recv_post needs an output handle", comm.ErrInvalid)
		}
		b, err := bytesOf(buf, count, dt)
		if err != nil {
			return err
		}
		src := int(peer)
		if peer == C.GOHCCL_ANY_SOURCE {
			src = transport.AnySource
		}
		r, err := c.PostRecv(src, int64(tag), b, int(count), reduce.DType(dt))
		if err != nil {
			return err
		}
		handles.Lock()
		handles.next++
		id := handles.next
		handles.reqs[id] = reqEntry{comm: uint64(h), req: r}
		handles.Unlock()
		*out = C.gohccl_req(id)
		return nil
	})
}

func takeReq(h C.gohccl_comm, req C.gohccl_req, remove bool) (*comm.RecvRequest, error) {
	handles.Lock()
	defer handles.Unlock()
	e, ok := handles.reqs[uint64(req)]
	if !ok || e.comm != uint64(h) {
		return nil, fmt.Errorf("%w: no posted receive with handle %d on communicator %d", comm.ErrInvalid, uint64(req), uint64(h))
	}
	if remove {
		delete(handles.reqs, uint64(req))
	}
	return e.req, nil
}

//export gohccl_recv_wait
func gohccl_recv_wait(h C.gohccl_comm, req C.gohccl_req, timeoutMs C.int64_t, source *C.int,
	errBuf *C.char, errN C.size_t) C.gohccl_status {
	return call(h, errBuf, errN, func(c *comm.Comm) error {
		r, err := takeReq(h, req, true)
		if err != nil {
			return err
		}
		src, err := c.WaitRecv(r, timeout(timeoutMs))
		if source != nil {
			*source = C.int(src)
		}
		return err
	})
}

//export gohccl_recv_test
func gohccl_recv_test(h C.gohccl_comm, req C.gohccl_req) C.int {
	r, err := takeReq(h, req, false)
	if err != nil {
		return -1
	}
	if r.Test() {
		return 1
	}
	return 0
}
