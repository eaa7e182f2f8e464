/*
 * gohccl.h: the C ABI of libgohccl, the Go collective communication library.
 *
 * This header is written by hand; it is the contract between the Go library
 * (built with `go build -buildmode=c-shared` from capi/) and its callers: the
 * C++ shim that registers the torch.distributed backend, C/C++ programs, and
 * the C ABI test in capi/test.
 *
 * Conventions
 *  - Every fallible function returns a gohccl_status: GOHCCL_OK (0) or a
 *    code below. On failure it writes a NUL-terminated sentence into the
 *    caller's buffer err (of err_len bytes, may be NULL/0), naming the
 *    operation, its sequence number, the peer and the cause.
 *  - Communicators and posted receives are integer handles (gohccl_comm,
 *    gohccl_req). C never holds a Go pointer; Go holds the caller's buffers
 *    only for the duration of a call, except a posted receive's buffer,
 *    which stays in use until gohccl_recv_wait returns for it or its
 *    communicator is destroyed.
 *  - Counts are in elements of the given dtype; offsets likewise.
 *  - timeout_ms bounds the whole call; 0 or negative means the
 *    communicator's default timeout (the one given at creation).
 *  - Functions on one communicator may be called from several threads, but
 *    collectives must be issued in the same order on every rank and not
 *    concurrently with each other; send/recv may overlap collectives.
 *  - After any failure other than GOHCCL_ERR_INVALID (which is refused
 *    before anything is sent) the communicator is broken: later calls fail
 *    at once with the first error (GOHCCL_ERR_BROKEN), except destroy.
 */
#ifndef GOHCCL_H
#define GOHCCL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GOHCCL_ABI_VERSION 2

typedef int gohccl_status;
enum {
  GOHCCL_OK = 0,
  GOHCCL_ERR_INVALID = 1,    /* bad argument: dtype, op, root, peer, count */
  GOHCCL_ERR_TIMEOUT = 2,    /* the deadline passed before the op finished */
  GOHCCL_ERR_PEER = 3,       /* a peer closed its connection or died */
  GOHCCL_ERR_MISMATCH = 4,   /* ranks issued different collectives */
  GOHCCL_ERR_BROKEN = 5,     /* the communicator failed earlier */
  GOHCCL_ERR_BOOTSTRAP = 6,  /* rendezvous or connection setup failed */
  GOHCCL_ERR_CONFIG = 7,     /* a GOHCCL_* variable is malformed, or differs across ranks where it must agree */
  GOHCCL_ERR_CLOSED = 8,     /* the communicator was destroyed or aborted */
  GOHCCL_ERR_INTERNAL = 9    /* a bug: please report the message */
};

/* Element types; values are stable. */
typedef enum {
  GOHCCL_FLOAT32 = 0,
  GOHCCL_FLOAT64 = 1,
  GOHCCL_FLOAT16 = 2,
  GOHCCL_BFLOAT16 = 3,
  GOHCCL_INT8 = 4,
  GOHCCL_UINT8 = 5,
  GOHCCL_INT16 = 6,
  GOHCCL_INT32 = 7,
  GOHCCL_INT64 = 8,
  GOHCCL_BOOL = 9
} gohccl_dtype;

/* Reduction operators. AVG is SUM divided by the group size (integer types
 * truncate toward zero). Bitwise operators take integer and bool types only.
 * PREMUL_SUM is done by the caller: scale the input, then SUM. */
typedef enum {
  GOHCCL_SUM = 0,
  GOHCCL_PRODUCT = 1,
  GOHCCL_MIN = 2,
  GOHCCL_MAX = 3,
  GOHCCL_BAND = 4,
  GOHCCL_BOR = 5,
  GOHCCL_BXOR = 6,
  GOHCCL_AVG = 7
} gohccl_redop;

typedef uint64_t gohccl_comm;
typedef uint64_t gohccl_req;

/* Any-source receive. */
#define GOHCCL_ANY_SOURCE (-1)

/*
 * gohccl_store_ops bridges a key-value store (torch's c10d::Store) into the
 * Go bootstrap. Each callback returns 0 on success, or non-zero after writing
 * a message into err (err_len bytes). ctx is passed back unchanged. The
 * callbacks are called only during gohccl_comm_create, from the calling
 * thread.
 *   set: store key = value.
 *   get: wait up to timeout_ms for key, then return its value in *value
 *        (allocated with malloc; libgohccl frees it with free) and *len.
 *   add: atomically add delta to the integer at key; *out = new value.
 */
typedef struct gohccl_store_ops {
  int (*set)(void* ctx, const char* key, const uint8_t* value, size_t len,
             char* err, size_t err_len);
  int (*get)(void* ctx, const char* key, int64_t timeout_ms, uint8_t** value,
             size_t* len, char* err, size_t err_len);
  int (*add)(void* ctx, const char* key, int64_t delta, int64_t* out,
             char* err, size_t err_len);
} gohccl_store_ops;

/* The Go side of the library includes this header for its types only
 * (GOHCCL_TYPES_ONLY): cgo writes its own prototypes, without const. */
#ifndef GOHCCL_TYPES_ONLY

/* gohccl_version returns the library version, e.g. "0.1.0"; static storage. */
const char* gohccl_version(void);

/* gohccl_abi_version returns GOHCCL_ABI_VERSION as built into the library. */
int gohccl_abi_version(void);

/* gohccl_dtype_info describes element type `code` as the library knows it:
 * writes its name ("float32", "bfloat16", ...) into name (name_len bytes)
 * and its size in bytes into *size, and returns 1; returns 0 for a code the
 * library does not know. For tests that check every language's list of
 * element types against the library's. */
int gohccl_dtype_info(int code, char* name, size_t name_len, int* size);

/*
 * gohccl_comm_create builds the communicator of rank `rank` in a group of
 * `size` ranks. All ranks call it with stores that share keys (a per-group
 * prefix store). It reads the GOHCCL_* variables from the process
 * environment at this moment, rendezvouses through the store, connects to
 * every peer and returns a handle in *comm. timeout_ms is the bootstrap
 * deadline and the default timeout of every later op.
 */
gohccl_status gohccl_comm_create(const gohccl_store_ops* ops, void* ctx,
                                 int rank, int size, int64_t timeout_ms,
                                 gohccl_comm* comm, char* err, size_t err_len);

/* gohccl_comm_destroy closes every connection, stops every goroutine and
 * frees every buffer of comm; posted receives fail with GOHCCL_ERR_CLOSED. */
gohccl_status gohccl_comm_destroy(gohccl_comm comm);

/* gohccl_comm_abort fails every op in progress on comm (and every later one)
 * with GOHCCL_ERR_CLOSED; it does not wait for them. destroy still frees. */
gohccl_status gohccl_comm_abort(gohccl_comm comm);

/* gohccl_comm_rank and gohccl_comm_size return -1 for an unknown handle. */
int gohccl_comm_rank(gohccl_comm comm);
int gohccl_comm_size(gohccl_comm comm);

/* gohccl_comm_describe writes a one-line description (ranks, transports,
 * buffer size) into buf. */
gohccl_status gohccl_comm_describe(gohccl_comm comm, char* buf, size_t len);

/* In-place all-reduce of count elements at buf. */
gohccl_status gohccl_allreduce(gohccl_comm comm, void* buf, uint64_t count,
                               gohccl_dtype dtype, gohccl_redop op,
                               int64_t timeout_ms, char* err, size_t err_len);

/* In-place broadcast of count elements from rank root. */
gohccl_status gohccl_broadcast(gohccl_comm comm, void* buf, uint64_t count,
                               gohccl_dtype dtype, int root, int64_t timeout_ms,
                               char* err, size_t err_len);

/* Reduce count elements into buf on rank root (in place there); other
 * ranks' buffers are left unchanged. */
gohccl_status gohccl_reduce(gohccl_comm comm, void* buf, uint64_t count,
                            gohccl_dtype dtype, gohccl_redop op, int root,
                            int64_t timeout_ms, char* err, size_t err_len);

/* All-gather: sendbuf holds count elements, recvbuf size*count, rank i's
 * block at offset i*count. sendbuf may equal recvbuf + rank*count. */
gohccl_status gohccl_allgather(gohccl_comm comm, const void* sendbuf,
                               void* recvbuf, uint64_t count,
                               gohccl_dtype dtype, int64_t timeout_ms,
                               char* err, size_t err_len);

/* Reduce-scatter: sendbuf holds size*count elements, recvbuf count; rank i
 * receives the reduction of block i. sendbuf is not modified. */
gohccl_status gohccl_reduce_scatter(gohccl_comm comm, const void* sendbuf,
                                    void* recvbuf, uint64_t count,
                                    gohccl_dtype dtype, gohccl_redop op,
                                    int64_t timeout_ms, char* err,
                                    size_t err_len);

/* Gather count elements from every rank into recvbuf (size*count, used on
 * root only; may be NULL elsewhere). */
gohccl_status gohccl_gather(gohccl_comm comm, const void* sendbuf,
                            void* recvbuf, uint64_t count, gohccl_dtype dtype,
                            int root, int64_t timeout_ms, char* err,
                            size_t err_len);

/* Scatter: root's sendbuf holds size*count elements (NULL elsewhere);
 * every rank receives its block of count elements into recvbuf. */
gohccl_status gohccl_scatter(gohccl_comm comm, const void* sendbuf,
                             void* recvbuf, uint64_t count, gohccl_dtype dtype,
                             int root, int64_t timeout_ms, char* err,
                             size_t err_len);

/* All-to-all with per-peer counts and offsets (arrays of size elements):
 * this rank sends send_counts[p] elements at sendbuf+send_offsets[p] to p,
 * and receives recv_counts[p] elements from p at recvbuf+recv_offsets[p].
 * A peer that sends a different count than expected fails the op on both. */
gohccl_status gohccl_alltoallv(gohccl_comm comm, const void* sendbuf,
                               const uint64_t* send_counts,
                               const uint64_t* send_offsets, void* recvbuf,
                               const uint64_t* recv_counts,
                               const uint64_t* recv_offsets,
                               gohccl_dtype dtype, int64_t timeout_ms,
                               char* err, size_t err_len);

/* Barrier: returns once every rank has entered it. */
gohccl_status gohccl_barrier(gohccl_comm comm, int64_t timeout_ms, char* err,
                             size_t err_len);

/* Point-to-point send of count elements to peer with a user tag. It returns
 * once buf may be reused; it never waits for the matching receive. */
gohccl_status gohccl_send(gohccl_comm comm, int peer, int64_t tag,
                          const void* buf, uint64_t count, gohccl_dtype dtype,
                          int64_t timeout_ms, char* err, size_t err_len);

/* Posts a receive of count elements from peer (or GOHCCL_ANY_SOURCE) with
 * a tag, and returns at once with a handle in *req. Receives from one peer
 * with one tag match sends in issue order. */
gohccl_status gohccl_recv_post(gohccl_comm comm, int peer, int64_t tag,
                               void* buf, uint64_t count, gohccl_dtype dtype,
                               gohccl_req* req, char* err, size_t err_len);

/* Waits for a posted receive; *source receives the sender's rank. The
 * handle is released when this returns, whatever the status. */
gohccl_status gohccl_recv_wait(gohccl_comm comm, gohccl_req req,
                               int64_t timeout_ms, int* source, char* err,
                               size_t err_len);

/* Returns 1 if the posted receive has finished (successfully or not), 0 if
 * not, -1 for an unknown handle. Does not release the handle. */
int gohccl_recv_test(gohccl_comm comm, gohccl_req req);

/* gohccl_trace_dump writes the flight record (docs/trace.md) of every live
 * communicator of this process into dir, one JSON file per communicator
 * named after its group, rank and host; with dir NULL or empty, into each
 * communicator's GOHCCL_TRACE_DIR (a communicator without one is skipped
 * and named in err). It does not wait for operations in progress: call it
 * while a collective hangs. The paths written go into paths, one per line
 * (truncated to paths_len). GOHCCL_OK if every communicator was written,
 * else GOHCCL_ERR_INVALID (no directory) or GOHCCL_ERR_INTERNAL (a write
 * failed) with the reasons in err; the others are still written.
 *
 * When a communicator is created with GOHCCL_TRACE_DIR set, the library also
 * installs a SIGUSR1 handler (once per process) that does the same with
 * dir NULL, from a goroutine, and then calls the handler that was installed
 * before it (Python's, faulthandler's), if any. */
gohccl_status gohccl_trace_dump(const char* dir, char* paths, size_t paths_len,
                                char* err, size_t err_len);

#endif /* GOHCCL_TYPES_ONLY */


/* ---- Device memory (ABI 2) -------------------------------------------
 *
 * gohccl_run runs any operation of this header on host memory, CUDA device
 * memory or Ascend (ACL) device memory, described by one gohccl_call. A
 * device buffer is staged: copied to pinned host memory in chunks, moved
 * by the host collective, copied back, with the copies of one chunk
 * overlapping the collective of the next (docs/devices.md). The runtime
 * (libcudart, libascendcl) is loaded the first time a call passes its
 * memory, from GOHCCL_CUDA_LIBRARY / GOHCCL_ACL_LIBRARY or the default
 * search; a process that passes host memory only never loads either.
 *
 * Stream semantics: the copies are queued on `stream` (NULL: the runtime's
 * default stream) of `device`, behind the work already queued there, so the
 * call sees everything queued on that stream before it. It returns once the
 * results are in device memory (the stream synchronized), so work queued on
 * any stream afterwards sees them. It sets the calling thread's current
 * device for its duration and puts the previous one back. An Ascend caller
 * initialises ACL itself (aclInit), as torch_npu does.
 *
 * All ranks must pass a call alike: a device buffer on one rank against a
 * host buffer on another is reported as mismatched collectives. Device
 * calls of one communicator run one at a time (they share its pinned
 * buffer, GOHCCL_BUFFSIZE bytes, allocated at the first device call with
 * cudaHostAlloc or aclrtMallocHost, freed by gohccl_comm_destroy); a
 * device receive holds it until its message has arrived.
 *
 * A runtime call that fails returns GOHCCL_ERR_DEVICE with a sentence that
 * names the call and its code ("aclrtMemcpyAsync returned 507899 (...)"),
 * and breaks the communicator: every peer's call fails with the cause. No
 * copy of the call is left running when it returns. Host calls through
 * gohccl_run behave as the functions above; those stay as they are.
 */

/* A runtime call failed, or the runtime could not be loaded. */
enum { GOHCCL_ERR_DEVICE = 10 };

/* Where a call's buffers live; values are stable. */
typedef enum {
  GOHCCL_MEMORY_HOST = 0,
  GOHCCL_MEMORY_CUDA = 1, /* cudaMalloc'd memory; stream is a cudaStream_t */
  GOHCCL_MEMORY_ACL = 2   /* aclrtMalloc'd memory; stream is an aclrtStream */
} gohccl_memory;

/* The operation of a gohccl_call; values are stable. */
typedef enum {
  GOHCCL_CALL_ALLREDUCE = 0,
  GOHCCL_CALL_BROADCAST = 1,
  GOHCCL_CALL_REDUCE = 2,
  GOHCCL_CALL_ALLGATHER = 3,
  GOHCCL_CALL_REDUCE_SCATTER = 4,
  GOHCCL_CALL_GATHER = 5,
  GOHCCL_CALL_SCATTER = 6,
  GOHCCL_CALL_ALLTOALLV = 7,
  GOHCCL_CALL_BARRIER = 8,
  GOHCCL_CALL_SEND = 9,
  GOHCCL_CALL_RECV = 10
} gohccl_call_kind;

/*
 * gohccl_call describes one operation. Zero it, then set what the
 * operation uses; each field means what the argument of the same name
 * means for the function of the same operation above.
 *   ALLREDUCE, BROADCAST, REDUCE  in place on recvbuf (sendbuf NULL or
 *                                 equal to recvbuf)
 *   ALLGATHER, REDUCE_SCATTER     sendbuf -> recvbuf
 *   GATHER, SCATTER               sendbuf -> recvbuf; root's recvbuf
 *                                 (gather) or sendbuf (scatter) only
 *   ALLTOALLV                     sendbuf, recvbuf and the four arrays
 *   SEND                          sendbuf to peer with tag
 *   RECV                          recvbuf from peer (or GOHCCL_ANY_SOURCE)
 *                                 with tag; blocks until the message is
 *                                 in recvbuf, then sets peer to the sender
 *   BARRIER                       no buffers; on a device it also waits
 *                                 for the work queued on the stream
 */
typedef struct gohccl_call {
  gohccl_call_kind kind;
  gohccl_memory memory;
  int device;      /* device index; ignored for host memory */
  void* stream;    /* cudaStream_t / aclrtStream; NULL: the default stream */
  const void* sendbuf;
  void* recvbuf;
  uint64_t count;  /* elements per rank, as above */
  gohccl_dtype dtype;
  gohccl_redop op;
  int root;
  int peer;
  int64_t tag;
  const uint64_t* send_counts;
  const uint64_t* send_offsets;
  const uint64_t* recv_counts;
  const uint64_t* recv_offsets;
  int64_t timeout_ms;
} gohccl_call;

#ifndef GOHCCL_TYPES_ONLY
/* gohccl_run runs *call on comm (see above). */
gohccl_status gohccl_run(gohccl_comm comm, gohccl_call* call, char* err,
                         size_t err_len);
#endif

/* ---- end of device memory ---- */

/* ---- tools: what `python -m gohccl.sim` and `python -m gohccl.info` run ----
 * Strings returned through these are allocated by libgohccl (malloc) and
 * released by the caller with gohccl_free. */
#ifndef GOHCCL_TYPES_ONLY
/* gohccl_free releases a string libgohccl returned. */
void gohccl_free(void* p);

/* gohccl_sim_main runs gohccl-sim's command line (goimpl/sim/cli) with the
 * argc arguments argv (options only, no program name) and returns its exit
 * status (0, or 2 for bad options). *out receives what it printed on
 * standard output, *err what it printed on standard error. */
int gohccl_sim_main(int argc, char** argv, char** out, char** err);

/* gohccl_info_json returns a JSON object describing this process's view:
 * versions (library, ABI, Go), the CPU (model, features), the reduce paths
 * it runs and the one GOHCCL_SIMD picks, and every GOHCCL_* variable with
 * its value, its source ("environment" or "default") and, for a value init
 * would refuse, "error". */
char* gohccl_info_json(void);

/* gohccl_comm_info_json sets *out to a JSON object describing comm: rank,
 * size, host, topology and nodes, the transport class to each rank, the
 * reduce path, buffer and segment sizes, GOHCCL_ALGO, and the tuner's priced
 * table for the tuned collectives at a few sizes. */
gohccl_status gohccl_comm_info_json(gohccl_comm comm, char** out, char* err,
                                    size_t err_len);
#endif

#ifdef __cplusplus
}
#endif

#endif /* GOHCCL_H */
