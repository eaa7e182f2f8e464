/*
 * device_test: every operation of the C ABI on device memory (gohccl_run),
 * through the test doubles of the CUDA and Ascend runtimes
 * (capi/test/doubles), as a C caller with device pointers and no torch
 * would use it.
 *
 * The test links both doubles, so libgohccl's default search finds them
 * already loaded by their sonames (libcudart.so.12, libascendcl.so), as it
 * finds torch's libcudart. Each group of N = 1..4 ranks runs as N threads,
 * rank r on device r with a stream of its own, and checks, for each runtime
 * and several counts (0, 1, odd, and counts that cross many chunks of the
 * 64 KiB buffer this test sets):
 *   - every operation's result against a reference computed here;
 *   - the bytes the double copied each way: every input byte down once,
 *     every output byte up once;
 *   - no call the double refused, nothing queued after a call returned,
 *     and no pinned buffer left after gohccl_comm_destroy.
 * Then: an injected runtime failure (a copy, a synchronization) names the
 * call and its code, breaks every rank's communicator, hangs nobody and
 * leaks nothing; a call sees the work queued on its stream before it (a
 * slow copy queued by the caller); GOHCCL_*_LIBRARY is honoured, and a
 * library that is not there is a clear error; bad arguments are refused.
 *
 * device_test --real-cuda PATH loads a real libcudart instead: on a machine
 * without a GPU its calls fail, and the test checks that this is a clear
 * GOHCCL_ERR_DEVICE naming the call, not a crash.
 *
 * It prints one line per failure and ends with "device_test: N passed, M
 * failed"; the exit status is 0 only when nothing failed.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "doubles/fake_control.h"
#include "gohccl.h"
#include "test_store.h"

/* The runtime calls the test makes itself, from the published prototypes
 * (resolved against the doubles it links). */
int cudaSetDevice(int dev);
int cudaMalloc(void** p, size_t n);
int cudaFree(void* p);
int cudaMemcpy(void* dst, const void* src, size_t n, int kind);
int cudaMemcpyAsync(void* dst, const void* src, size_t n, int kind, void* stream);
int cudaHostAlloc(void** p, size_t n, unsigned int flags);
int cudaFreeHost(void* p);
int cudaStreamCreate(void** stream);
int cudaStreamDestroy(void* stream);
int aclInit(const char* config);
int aclrtSetDevice(int32_t dev);
int aclrtMalloc(void** p, size_t n, int policy);
int aclrtFree(void* p);
int aclrtMemcpy(void* dst, size_t dest_max, const void* src, size_t n, int kind);
int aclrtCreateStream(void** stream);
int aclrtDestroyStream(void* stream);

#define ERR_LEN 4096
#define MAX_RANKS 4
#define TIMEOUT_MS 60000
#define H2D 1
#define D2H 2

static pthread_mutex_t report_mu = PTHREAD_MUTEX_INITIALIZER;
static int passed, failed;

static void check(int ok, const char* fmt, ...) {
  pthread_mutex_lock(&report_mu);
  if (ok) {
    passed++;
  } else {
    va_list ap;
    failed++;
    fputs("FAIL: ", stdout);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fputc('\n', stdout);
    fflush(stdout);
  }
  pthread_mutex_unlock(&report_mu);
}

/* ---- The two runtimes, as the test drives them ---- */

struct runtime {
  const char* name;
  gohccl_memory memory;
  const char* memcpy_call; /* the names an injected failure uses */
  const char* sync_call;
  int fail_code;
  void (*counters)(fake_counters*);
  void (*reset)(void);
  void (*inject)(const char*, long, int);
  void (*set_delay_us)(long);
  const char* (*last_violation)(void);
};

static const struct runtime cuda = {"CUDA", GOHCCL_MEMORY_CUDA, "cudaMemcpyAsync", "cudaStreamSynchronize", 700,
                                    fakecuda_counters, fakecuda_reset, fakecuda_inject, fakecuda_set_delay_us,
                                    fakecuda_last_violation};
static const struct runtime acl = {"ACL", GOHCCL_MEMORY_ACL, "aclrtMemcpyAsync", "aclrtSynchronizeStream", 507899,
                                   fakeacl_counters, fakeacl_reset, fakeacl_inject, fakeacl_set_delay_us,
                                   fakeacl_last_violation};

static int is_cuda(const struct runtime* rt) { return rt->memory == GOHCCL_MEMORY_CUDA; }

static void rt_set_device(const struct runtime* rt, int dev) {
  int rc = is_cuda(rt) ? cudaSetDevice(dev) : aclrtSetDevice(dev);
  check(rc == 0, "%s: set device %d: %d", rt->name, dev, rc);
}

/* dev_alloc allocates n bytes (at least 1) of device memory on the calling
 * thread's device, holding src if given, else zeros. */
static void* dev_alloc(const struct runtime* rt, const void* src, size_t n) {
  void* p = NULL;
  size_t size = n > 0 ? n : 1;
  int rc = is_cuda(rt) ? cudaMalloc(&p, size) : aclrtMalloc(&p, size, 0);
  check(rc == 0 && p != NULL, "%s: device malloc of %zu: %d", rt->name, size, rc);
  void* zeros = calloc(1, size);
  const void* from = src != NULL ? src : zeros;
  rc = is_cuda(rt) ? cudaMemcpy(p, from, size, H2D) : aclrtMemcpy(p, size, from, size, H2D);
  check(rc == 0, "%s: filling device memory: %d", rt->name, rc);
  free(zeros);
  return p;
}

static void dev_read(const struct runtime* rt, void* dst, const void* dev, size_t n) {
  if (n == 0) {
    return;
  }
  int rc = is_cuda(rt) ? cudaMemcpy(dst, dev, n, D2H) : aclrtMemcpy(dst, n, dev, n, D2H);
  check(rc == 0, "%s: reading device memory: %d", rt->name, rc);
}

static void dev_free(const struct runtime* rt, void* p) {
  if (p != NULL) {
    int rc = is_cuda(rt) ? cudaFree(p) : aclrtFree(p);
    check(rc == 0, "%s: device free: %d", rt->name, rc);
  }
}

static void* stream_create(const struct runtime* rt) {
  void* s = NULL;
  int rc = is_cuda(rt) ? cudaStreamCreate(&s) : aclrtCreateStream(&s);
  check(rc == 0, "%s: stream create: %d", rt->name, rc);
  return s;
}

static void stream_destroy(const struct runtime* rt, void* s) {
  int rc = is_cuda(rt) ? cudaStreamDestroy(s) : aclrtDestroyStream(s);
  check(rc == 0, "%s: stream destroy: %d", rt->name, rc);
}

/* ---- Groups of thread ranks ---- */

/* expected bytes copied each way, summed by the ranks of a group */
static uint64_t want_down, want_up;

static void expect(uint64_t down, uint64_t up) {
  __atomic_fetch_add(&want_down, down, __ATOMIC_RELAXED);
  __atomic_fetch_add(&want_up, up, __ATOMIC_RELAXED);
}

struct rank {
  const struct runtime* rt;
  struct test_store* store;
  int rank, size;
  gohccl_comm comm;
  void* stream;
  void (*body)(struct rank*);
};

/* call returns a gohccl_call for this rank's device and stream. */
static gohccl_call device_call(struct rank* r, gohccl_call_kind kind) {
  gohccl_call c;
  memset(&c, 0, sizeof(c));
  c.kind = kind;
  c.memory = r->rt->memory;
  c.device = r->rank;
  c.stream = r->stream;
  c.dtype = GOHCCL_INT32;
  c.op = GOHCCL_SUM;
  c.timeout_ms = TIMEOUT_MS;
  return c;
}

static void run(struct rank* r, gohccl_call* c, const char* what, uint64_t count) {
  char err[ERR_LEN] = "";
  gohccl_status st = gohccl_run(r->comm, c, err, sizeof(err));
  check(st == GOHCCL_OK, "%s n%d rank %d: %s of %llu: status %d: %s", r->rt->name, r->size, r->rank, what,
        (unsigned long long)count, st, err);
}

/* value is rank r's i-th input element: a small integer, so sums are exact. */
static int32_t value(int r, uint64_t i, int salt) { return (int32_t)((r * 7 + i * 3 + (uint64_t)salt) % 19) - 9; }

static int32_t* inputs(int r, uint64_t n, int salt) {
  int32_t* v = malloc((n > 0 ? n : 1) * sizeof(int32_t));
  for (uint64_t i = 0; i < n; i++) {
    v[i] = value(r, i, salt);
  }
  return v;
}

/* compare checks n int32 of device memory against want. */
static void compare(struct rank* r, const char* what, uint64_t count, const void* dev, const int32_t* want,
                    uint64_t n) {
  int32_t* got = malloc((n > 0 ? n : 1) * sizeof(int32_t));
  dev_read(r->rt, got, dev, n * sizeof(int32_t));
  uint64_t bad = 0, first = 0;
  for (uint64_t i = 0; i < n; i++) {
    if (got[i] != want[i] && bad++ == 0) {
      first = i;
    }
  }
  check(bad == 0, "%s n%d rank %d: %s of %llu: %llu wrong elements, the first at %llu (%d, want %d)", r->rt->name,
        r->size, r->rank, what, (unsigned long long)count, (unsigned long long)bad, (unsigned long long)first,
        bad ? got[first] : 0, bad ? want[first] : 0);
  free(got);
}

static const uint64_t counts[] = {0, 1, 1001, 70001};

/* every_op runs every operation at each count on rank r. */
static void every_op(struct rank* r) {
  const struct runtime* rt = r->rt;
  const int n = r->size, me = r->rank;
  for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
    const uint64_t count = counts[ci], bytes = count * sizeof(int32_t);
    int32_t* want = malloc((n * count + 1) * sizeof(int32_t));

    /* allreduce, in place */
    int32_t* in = inputs(me, count, 1);
    void* buf = dev_alloc(rt, in, bytes);
    gohccl_call c = device_call(r, GOHCCL_CALL_ALLREDUCE);
    c.recvbuf = buf;
    c.count = count;
    run(r, &c, "allreduce", count);
    for (uint64_t i = 0; i < count; i++) {
      want[i] = 0;
      for (int p = 0; p < n; p++) {
        want[i] += value(p, i, 1);
      }
    }
    compare(r, "allreduce", count, buf, want, count);
    expect(bytes, bytes);

    /* broadcast from the last rank */
    int root = n - 1;
    free(in);
    in = inputs(me, count, 2);
    dev_free(rt, buf);
    buf = dev_alloc(rt, in, bytes);
    c = device_call(r, GOHCCL_CALL_BROADCAST);
    c.recvbuf = buf;
    c.count = count;
    c.root = root;
    run(r, &c, "broadcast", count);
    for (uint64_t i = 0; i < count; i++) {
      want[i] = value(root, i, 2);
    }
    compare(r, "broadcast", count, buf, want, count);
    expect(me == root ? bytes : 0, me == root ? 0 : bytes);

    /* reduce onto the middle rank; the others keep their input */
    root = n / 2;
    dev_free(rt, buf);
    buf = dev_alloc(rt, in, bytes);
    c = device_call(r, GOHCCL_CALL_REDUCE);
    c.recvbuf = buf;
    c.count = count;
    c.root = root;
    c.op = GOHCCL_MAX;
    run(r, &c, "reduce", count);
    for (uint64_t i = 0; i < count; i++) {
      want[i] = value(me, i, 2);
      for (int p = 0; me == root && p < n; p++) {
        want[i] = value(p, i, 2) > want[i] ? value(p, i, 2) : want[i];
      }
    }
    compare(r, "reduce", count, buf, want, count);
    expect(bytes, me == root ? bytes : 0);
    dev_free(rt, buf);

    /* allgather */
    void* out = dev_alloc(rt, NULL, n * bytes);
    buf = dev_alloc(rt, in, bytes);
    c = device_call(r, GOHCCL_CALL_ALLGATHER);
    c.sendbuf = buf;
    c.recvbuf = out;
    c.count = count;
    run(r, &c, "allgather", count);
    for (int p = 0; p < n; p++) {
      for (uint64_t i = 0; i < count; i++) {
        want[p * count + i] = value(p, i, 2);
      }
    }
    compare(r, "allgather", count, out, want, n * count);
    expect(bytes, n * bytes);
    dev_free(rt, buf);
    dev_free(rt, out);

    /* reduce_scatter */
    free(in);
    in = inputs(me, n * count, 3);
    buf = dev_alloc(rt, in, n * bytes);
    out = dev_alloc(rt, NULL, bytes);
    c = device_call(r, GOHCCL_CALL_REDUCE_SCATTER);
    c.sendbuf = buf;
    c.recvbuf = out;
    c.count = count;
    run(r, &c, "reduce_scatter", count);
    for (uint64_t i = 0; i < count; i++) {
      want[i] = 0;
      for (int p = 0; p < n; p++) {
        want[i] += value(p, me * count + i, 3);
      }
    }
    compare(r, "reduce_scatter", count, out, want, count);
    expect(n * bytes, bytes);
    dev_free(rt, buf);
    dev_free(rt, out);

    /* gather onto rank 0; the leaves pass no output */
    root = 0;
    free(in);
    in = inputs(me, count, 4);
    buf = dev_alloc(rt, in, bytes);
    out = me == root ? dev_alloc(rt, NULL, n * bytes) : NULL;
    c = device_call(r, GOHCCL_CALL_GATHER);
    c.sendbuf = buf;
    c.recvbuf = out;
    c.count = count;
    c.root = root;
    run(r, &c, "gather", count);
    if (me == root) {
      for (int p = 0; p < n; p++) {
        for (uint64_t i = 0; i < count; i++) {
          want[p * count + i] = value(p, i, 4);
        }
      }
      compare(r, "gather", count, out, want, n * count);
    }
    expect(bytes, me == root ? n * bytes : 0);
    dev_free(rt, buf);
    dev_free(rt, out);

    /* scatter from the last rank; the leaves pass no input */
    root = n - 1;
    free(in);
    in = inputs(root, n * count, 5);
    buf = me == root ? dev_alloc(rt, in, n * bytes) : NULL;
    out = dev_alloc(rt, NULL, bytes);
    c = device_call(r, GOHCCL_CALL_SCATTER);
    c.sendbuf = buf;
    c.recvbuf = out;
    c.count = count;
    c.root = root;
    run(r, &c, "scatter", count);
    compare(r, "scatter", count, out, in + me * count, count);
    expect(me == root ? n * bytes : 0, bytes);
    dev_free(rt, buf);
    dev_free(rt, out);

    /* alltoallv: q sends p count*((q+2p)%3+1)/3 elements, at offsets with
     * gaps of 2 elements that must stay zero */
    uint64_t sc[MAX_RANKS], so[MAX_RANKS], rc[MAX_RANKS], ro[MAX_RANKS], sext = 0, rext = 0;
    for (int p = 0; p < n; p++) {
      sc[p] = count * (uint64_t)((me + 2 * p) % 3 + 1) / 3;
      so[p] = sext + 2;
      sext = so[p] + sc[p];
      rc[p] = count * (uint64_t)((p + 2 * me) % 3 + 1) / 3;
      ro[p] = rext + 2;
      rext = ro[p] + rc[p];
    }
    free(in);
    in = inputs(me, sext, 6);
    buf = dev_alloc(rt, in, sext * sizeof(int32_t));
    out = dev_alloc(rt, NULL, rext * sizeof(int32_t));
    c = device_call(r, GOHCCL_CALL_ALLTOALLV);
    c.sendbuf = buf;
    c.recvbuf = out;
    c.send_counts = sc;
    c.send_offsets = so;
    c.recv_counts = rc;
    c.recv_offsets = ro;
    run(r, &c, "alltoallv", count);
    int32_t* want_a2a = calloc(rext + 1, sizeof(int32_t));
    for (int q = 0; q < n; q++) {
      /* q's send offset to me: its layout, recomputed */
      uint64_t at = 0, off = 0;
      for (int p = 0; p <= me; p++) {
        off = at + 2;
        at = off + count * (uint64_t)((q + 2 * p) % 3 + 1) / 3;
      }
      for (uint64_t i = 0; i < rc[q]; i++) {
        want_a2a[ro[q] + i] = value(q, off + i, 6);
      }
    }
    compare(r, "alltoallv", count, out, want_a2a, rext);
    uint64_t sent = 0, got = 0;
    for (int p = 0; p < n; p++) {
      sent += sc[p];
      got += rc[p];
    }
    expect(sent * sizeof(int32_t), got * sizeof(int32_t));
    free(want_a2a);
    dev_free(rt, buf);
    dev_free(rt, out);

    /* send/recv around a ring: even ranks send first, odd ranks receive
     * from any source first */
    if (n > 1) {
      free(in);
      in = inputs(me, count, 7);
      buf = dev_alloc(rt, in, bytes);
      out = dev_alloc(rt, NULL, bytes);
      gohccl_call s = device_call(r, GOHCCL_CALL_SEND);
      s.sendbuf = buf;
      s.count = count;
      s.peer = (me + 1) % n;
      s.tag = 5;
      gohccl_call rv = device_call(r, GOHCCL_CALL_RECV);
      rv.recvbuf = out;
      rv.count = count;
      rv.peer = me % 2 ? GOHCCL_ANY_SOURCE : (me + n - 1) % n;
      rv.tag = 5;
      if (me % 2 == 0) {
        run(r, &s, "send", count);
      }
      run(r, &rv, "recv", count);
      if (me % 2 == 1) {
        run(r, &s, "send", count);
      }
      check(rv.peer == (me + n - 1) % n, "%s n%d rank %d: recv's source is %d", rt->name, n, me, rv.peer);
      for (uint64_t i = 0; i < count; i++) {
        want[i] = value((me + n - 1) % n, i, 7);
      }
      compare(r, "recv", count, out, want, count);
      expect(bytes, bytes);
      dev_free(rt, buf);
      dev_free(rt, out);
    }

    c = device_call(r, GOHCCL_CALL_BARRIER);
    run(r, &c, "barrier", count);
    free(in);
    free(want);
  }
}

/* exchange: the two ranks send to each other and receive at once (torch's
 * isend + irecv pair), a message of many chunks each way, the send on a
 * thread and stream of its own. A device send and a device receive of one
 * communicator must be able to run together: with one set of staging slots
 * for both, each rank's receive held the slots its send needed (seen on a
 * GPU: both ranks timed out). */
struct exchange_send {
  struct rank* r;
  void* buf;
  uint64_t count;
};

static void* exchange_sender(void* p) {
  struct exchange_send* x = p;
  struct rank* r = x->r;
  rt_set_device(r->rt, r->rank);
  void* stream = stream_create(r->rt);
  gohccl_call s = device_call(r, GOHCCL_CALL_SEND);
  s.stream = stream;
  s.sendbuf = x->buf;
  s.count = x->count;
  s.peer = 1 - r->rank;
  s.tag = 9;
  run(r, &s, "exchange send", x->count);
  stream_destroy(r->rt, stream);
  return NULL;
}

static void exchange(struct rank* r) {
  const uint64_t count = 70001;
  const size_t bytes = count * sizeof(int32_t);
  int32_t* in = inputs(r->rank, count, 11);
  int32_t* want = inputs(1 - r->rank, count, 11);
  void* buf = dev_alloc(r->rt, in, bytes);
  void* out = dev_alloc(r->rt, NULL, bytes);
  struct exchange_send x = {r, buf, count};
  pthread_t t;
  pthread_create(&t, NULL, exchange_sender, &x);
  gohccl_call rv = device_call(r, GOHCCL_CALL_RECV);
  rv.recvbuf = out;
  rv.count = count;
  rv.peer = 1 - r->rank;
  rv.tag = 9;
  run(r, &rv, "exchange recv", count);
  pthread_join(t, NULL);
  compare(r, "exchange recv", count, out, want, count);
  expect(bytes, bytes);
  free(in);
  free(want);
  dev_free(r->rt, buf);
  dev_free(r->rt, out);
}

static void* rank_main(void* p) {
  struct rank* r = p;
  char err[ERR_LEN] = "";
  rt_set_device(r->rt, r->rank);
  r->stream = stream_create(r->rt);
  gohccl_status st = gohccl_comm_create(&test_store_ops, r->store, r->rank, r->size, TIMEOUT_MS, &r->comm, err,
                                        sizeof(err));
  check(st == GOHCCL_OK, "%s n%d rank %d: comm_create: %d: %s", r->rt->name, r->size, r->rank, st, err);
  if (st == GOHCCL_OK) {
    r->body(r);
    check(gohccl_comm_destroy(r->comm) == GOHCCL_OK, "%s n%d rank %d: destroy", r->rt->name, r->size, r->rank);
  }
  stream_destroy(r->rt, r->stream);
  return NULL;
}

/* group runs body on n thread ranks, then checks the double's counters. */
static void group(const struct runtime* rt, int n, void (*body)(struct rank*), int check_bytes) {
  struct test_store store;
  struct rank ranks[MAX_RANKS];
  pthread_t threads[MAX_RANKS];
  test_store_init(&store);
  rt->reset();
  want_down = want_up = 0;
  for (int i = 0; i < n; i++) {
    ranks[i] = (struct rank){.rt = rt, .store = &store, .rank = i, .size = n, .body = body};
    pthread_create(&threads[i], NULL, rank_main, &ranks[i]);
  }
  for (int i = 0; i < n; i++) {
    pthread_join(threads[i], NULL);
  }
  test_store_free(&store);
  fake_counters fc;
  rt->counters(&fc);
  if (check_bytes) {
    check(fc.bytes_down == want_down, "%s n%d: %llu bytes copied down, want %llu", rt->name, n,
          (unsigned long long)fc.bytes_down, (unsigned long long)want_down);
    check(fc.bytes_up == want_up, "%s n%d: %llu bytes copied up, want %llu", rt->name, n,
          (unsigned long long)fc.bytes_up, (unsigned long long)want_up);
  }
  check(fc.violations == 0, "%s n%d: %llu calls refused by the double, the last: %s", rt->name, n,
        (unsigned long long)fc.violations, rt->last_violation());
  check(fc.pending == 0, "%s n%d: %llu copies still queued", rt->name, n, (unsigned long long)fc.pending);
  check(fc.live_pinned == 0, "%s n%d: %lld pinned allocations left after destroy", rt->name, n,
        (long long)fc.live_pinned);
  check(fc.live_device == 0, "%s n%d: %lld device allocations left (the test's)", rt->name, n,
        (long long)fc.live_device);
  printf("%s n%d: %llu copies, %llu bytes down, %llu up, %llu unaligned\n", rt->name, n,
         (unsigned long long)fc.copies, (unsigned long long)fc.bytes_down, (unsigned long long)fc.bytes_up,
         (unsigned long long)fc.unaligned);
}

/* ---- Failures ---- */

static gohccl_status statuses[MAX_RANKS];
static char messages[MAX_RANKS][ERR_LEN];
static gohccl_status after[MAX_RANKS];
static uint64_t pending_after;

/* failing_allreduce runs an all-reduce into which the group's caller has
 * injected a runtime failure, then one more call. */
static void failing_allreduce(struct rank* r) {
  const uint64_t count = 70001;
  int32_t* in = inputs(r->rank, count, 1);
  void* buf = dev_alloc(r->rt, in, count * sizeof(int32_t));
  gohccl_call c = device_call(r, GOHCCL_CALL_ALLREDUCE);
  c.recvbuf = buf;
  c.count = count;
  c.timeout_ms = 30000;
  statuses[r->rank] = gohccl_run(r->comm, &c, messages[r->rank], ERR_LEN);
  fake_counters fc;
  r->rt->counters(&fc);
  __atomic_fetch_add(&pending_after, fc.pending, __ATOMIC_RELAXED);
  char err[ERR_LEN];
  after[r->rank] = gohccl_run(r->comm, &c, err, sizeof(err));
  dev_free(r->rt, buf);
  free(in);
}

static void check_failure(const struct runtime* rt, const char* call) {
  const int n = 3;
  char want[256];
  snprintf(want, sizeof(want), "%s returned %d", call, rt->fail_code);
  rt->inject(call, 9, rt->fail_code);
  pending_after = 0;
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  group(rt, n, failing_allreduce, 0);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
  check(secs < 20, "%s: injected %s: the group took %.1f s (the timeout is 30)", rt->name, call, secs);
  int device_errors = 0;
  for (int i = 0; i < n; i++) {
    check(statuses[i] != GOHCCL_OK, "%s: injected %s: rank %d succeeded", rt->name, call, i);
    check(strstr(messages[i], want) != NULL, "%s: injected %s: rank %d's error does not say \"%s\": %s", rt->name,
          call, i, want, messages[i]);
    device_errors += statuses[i] == GOHCCL_ERR_DEVICE;
    check(after[i] == GOHCCL_ERR_BROKEN, "%s: injected %s: rank %d's next call: status %d, want BROKEN", rt->name,
          call, i, after[i]);
  }
  check(device_errors == 1, "%s: injected %s: %d ranks returned GOHCCL_ERR_DEVICE, want 1", rt->name, call,
        device_errors);
  check(pending_after == 0, "%s: injected %s: copies still queued after the failed call returned", rt->name, call);
  printf("%s: injected %s: %s\n", rt->name, call, messages[0]);
}

/* ---- Stream order, memory kinds, arguments, libraries ---- */

/* stream_order: the caller queues a slow copy on its stream, then calls an
 * all-reduce on the same stream, which must see the copy's data. */
static void stream_order(struct rank* r) {
  const uint64_t count = 4096;
  int32_t* pinned = NULL;
  check(cudaHostAlloc((void**)&pinned, count * sizeof(int32_t), 0) == 0, "stream order: cudaHostAlloc");
  for (uint64_t i = 0; i < count; i++) {
    pinned[i] = (int32_t)i;
  }
  void* buf = dev_alloc(r->rt, NULL, count * sizeof(int32_t));
  fakecuda_set_delay_us(50000);
  check(cudaMemcpyAsync(buf, pinned, count * sizeof(int32_t), H2D, r->stream) == 0, "stream order: copy");
  gohccl_call c = device_call(r, GOHCCL_CALL_ALLREDUCE);
  c.recvbuf = buf;
  c.count = count;
  run(r, &c, "allreduce behind a slow copy", count);
  fakecuda_set_delay_us(0);
  compare(r, "allreduce behind a slow copy", count, buf, pinned, count);
  dev_free(r->rt, buf);
  cudaFreeHost(pinned);
}

/* host_and_bad_arguments: host memory through gohccl_run, then calls that
 * must be refused before anything moves. */
static void host_and_bad_arguments(struct rank* r) {
  int32_t host[64];
  for (int i = 0; i < 64; i++) {
    host[i] = r->rank + i;
  }
  gohccl_call c = device_call(r, GOHCCL_CALL_ALLREDUCE);
  c.memory = GOHCCL_MEMORY_HOST;
  c.recvbuf = host;
  c.count = 64;
  run(r, &c, "host allreduce through gohccl_run", 64);
  int ok = 1;
  for (int i = 0; i < 64; i++) {
    ok &= host[i] == r->size * i + r->size * (r->size - 1) / 2;
  }
  check(ok, "n%d rank %d: host allreduce through gohccl_run: wrong result", r->size, r->rank);

  void* buf = dev_alloc(r->rt, NULL, 64 * sizeof(int32_t));
  struct {
    const char* what;
    gohccl_call call;
  } bad[4];
  bad[0].what = "memory kind 7";
  bad[0].call = device_call(r, GOHCCL_CALL_ALLREDUCE);
  bad[0].call.memory = (gohccl_memory)7;
  bad[1].what = "allreduce with a sendbuf apart from recvbuf";
  bad[1].call = device_call(r, GOHCCL_CALL_ALLREDUCE);
  bad[1].call.sendbuf = host;
  bad[2].what = "device -1";
  bad[2].call = device_call(r, GOHCCL_CALL_ALLREDUCE);
  bad[2].call.device = -1;
  bad[3].what = "NULL device buffer";
  bad[3].call = device_call(r, GOHCCL_CALL_ALLREDUCE);
  for (int i = 0; i < 4; i++) {
    char err[ERR_LEN] = "";
    if (i < 3) {
      bad[i].call.recvbuf = buf;
    }
    bad[i].call.count = 64;
    gohccl_status st = gohccl_run(r->comm, &bad[i].call, err, sizeof(err));
    check(st == GOHCCL_ERR_INVALID && err[0] != '\0', "n%d rank %d: %s: status %d (%s), want INVALID", r->size,
          r->rank, bad[i].what, st, err);
  }
  check(gohccl_run(r->comm, NULL, NULL, 0) == GOHCCL_ERR_INVALID, "gohccl_run(NULL call) is not INVALID");
  /* Still usable: */
  c = device_call(r, GOHCCL_CALL_ALLREDUCE);
  c.recvbuf = buf;
  c.count = 64;
  run(r, &c, "allreduce after refused calls", 64);
  expect(64 * sizeof(int32_t), 64 * sizeof(int32_t));
  dev_free(r->rt, buf);
}

static gohccl_status load_status;
static char load_message[ERR_LEN];

static void one_allreduce(struct rank* r) {
  void* buf = dev_alloc(r->rt, NULL, 16 * sizeof(int32_t));
  gohccl_call c = device_call(r, GOHCCL_CALL_ALLREDUCE);
  c.recvbuf = buf;
  c.count = 16;
  load_status = gohccl_run(r->comm, &c, load_message, sizeof(load_message));
  dev_free(r->rt, buf);
}

static void check_libraries(void) {
  setenv("GOHCCL_CUDA_LIBRARY", "/nonexistent/libcudart.so.12", 1);
  group(&cuda, 1, one_allreduce, 0);
  unsetenv("GOHCCL_CUDA_LIBRARY");
  check(load_status == GOHCCL_ERR_DEVICE && strstr(load_message, "GOHCCL_CUDA_LIBRARY") != NULL &&
            strstr(load_message, "/nonexistent/libcudart.so.12") != NULL,
        "a missing GOHCCL_CUDA_LIBRARY: status %d: %s", load_status, load_message);
  printf("missing library: %s\n", load_message);

  setenv("GOHCCL_ACL_LIBRARY", FAKE_ACL_PATH, 1);
  group(&acl, 1, one_allreduce, 0);
  unsetenv("GOHCCL_ACL_LIBRARY");
  check(load_status == GOHCCL_OK, "GOHCCL_ACL_LIBRARY=%s: status %d: %s", FAKE_ACL_PATH, load_status, load_message);
}

/* ---- A real libcudart, on a machine that may have no GPU ---- */

static int real_cuda(const char* path) {
  struct test_store store;
  char err[ERR_LEN] = "";
  gohccl_comm comm = 0;
  setenv("GOHCCL_CUDA_LIBRARY", path, 1);
  test_store_init(&store);
  gohccl_status st = gohccl_comm_create(&test_store_ops, &store, 0, 1, TIMEOUT_MS, &comm, err, sizeof(err));
  check(st == GOHCCL_OK, "comm_create: %d: %s", st, err);
  gohccl_call c;
  memset(&c, 0, sizeof(c));
  c.kind = GOHCCL_CALL_ALLREDUCE;
  c.memory = GOHCCL_MEMORY_CUDA;
  c.dtype = GOHCCL_FLOAT32;
  c.count = 0; /* no device memory needed: with a GPU this succeeds */
  st = gohccl_run(comm, &c, err, sizeof(err));
  printf("real libcudart %s: status %d: %s\n", path, st, st == GOHCCL_OK ? "ok" : err);
  check(st == GOHCCL_OK || (st == GOHCCL_ERR_DEVICE && strstr(err, "returned") != NULL && strstr(err, "cuda") != NULL),
        "a real libcudart: status %d, want OK or GOHCCL_ERR_DEVICE naming a cuda call: %s", st, err);
  gohccl_comm_destroy(comm);
  test_store_free(&store);
  printf("device_test: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "--real-cuda") == 0) {
    return real_cuda(argv[2]);
  }
  check(gohccl_abi_version() == GOHCCL_ABI_VERSION && GOHCCL_ABI_VERSION >= 2, "ABI version %d, header %d",
        gohccl_abi_version(), GOHCCL_ABI_VERSION);
  check(aclInit(NULL) == 0, "aclInit");
  /* Small slots, so that the larger counts cross many chunks. */
  setenv("GOHCCL_BUFFSIZE", "64K", 1);

  const struct runtime* rts[] = {&cuda, &acl};
  for (int i = 0; i < 2; i++) {
    for (int n = 1; n <= MAX_RANKS; n++) {
      group(rts[i], n, every_op, 1);
    }
    group(rts[i], 2, host_and_bad_arguments, 1);
    group(rts[i], 2, exchange, 1);
    check_failure(rts[i], rts[i]->memcpy_call);
    check_failure(rts[i], rts[i]->sync_call);
  }
  group(&cuda, 1, stream_order, 0);
  check_libraries();

  printf("device_test: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
