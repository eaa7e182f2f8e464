/*
 * fake_runtime.h: the engine the two runtime doubles share, included once
 * by each (fake_cudart.c, fake_ascendcl.c), so that each library has its
 * own copy of the state below and exports only its runtime's names.
 *
 * Device memory is one memfd mapped twice: the addresses handed out
 * (cudaMalloc, aclrtMalloc) lie in a PROT_NONE mapping, so anything but the
 * double that dereferences a device pointer faults; the double copies
 * through a second, writable mapping of the same pages. Pinned host memory
 * (cudaHostAlloc, aclrtMallocHost) is 64-byte aligned heap memory the double
 * tracks. Each stream is a thread that runs its copies in issue order,
 * after the configured delay. Every call is checked (kind against where
 * each side lives, sizes against the allocations, the stream and the
 * calling thread's device); a refused call returns the runtime's error code
 * and counts a violation.
 */
#ifndef GOHCCL_FAKE_RUNTIME_H
#define GOHCCL_FAKE_RUNTIME_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fake_control.h"

#define FAKE_DEVICES 8
#define FAKE_KIND_HOST_TO_DEVICE 1
#define FAKE_KIND_DEVICE_TO_HOST 2

/* The codes the engine returns; each double fills in its runtime's. */
struct fake_codes {
  int invalid_value;  /* a bad argument */
  int invalid_device; /* no such device */
  int bad_stream;     /* unknown stream, or another device's */
  int bad_address;    /* not device memory */
  int no_device;      /* the thread has no device (ACL) */
  int uninitialized;  /* aclInit not called (ACL) */
  int out_of_memory;
};

struct fake_block {
  uintptr_t addr; /* device address, or the pinned memory itself */
  size_t size;
  int device;
  struct fake_block* next;
};

struct fake_task {
  void* dst;
  const void* src;
  size_t n;
};

struct fake_stream {
  int device; /* -1: the default stream, any device's */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cond;
  struct fake_task* queue;
  size_t head, len, cap;
  int busy, stop;
  struct fake_stream* next;
};

static struct {
  pthread_mutex_t mu;
  const struct fake_codes* codes;
  int require_init, initialized, strict_align;
  /* device memory */
  char* dev_view; /* PROT_NONE: the addresses handed out */
  char* dev_rw;   /* the same pages, writable */
  size_t heap_size;
  struct fake_block* dev;
  struct fake_block* pinned;
  struct fake_stream* streams;
  struct fake_stream* default_stream;
  /* counters */
  uint64_t bytes_down, bytes_up, copies, syncs, violations, unaligned;
  int64_t live_pinned, live_device;
  char last_violation[512];
  /* controls */
  char fail_call[64];
  long fail_nth;
  int fail_code;
  long delay_us;
} fake = {.mu = PTHREAD_MUTEX_INITIALIZER};

static __thread int fake_thread_device = -2; /* -2: never set */
static __thread char fake_thread_msg[512];

static void fake_message(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fake_thread_msg, sizeof(fake_thread_msg), fmt, ap);
  va_end(ap);
}

/* fake_refuse records a refused call; the caller holds fake.mu. */
static int fake_refuse(int code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fake.last_violation, sizeof(fake.last_violation), fmt, ap);
  va_end(ap);
  fake.violations++;
  snprintf(fake_thread_msg, sizeof(fake_thread_msg), "%s", fake.last_violation);
  return code;
}

/* fake_enter counts a call and returns the injected code for it, or 0;
 * the caller holds fake.mu. */
static int fake_enter(const char* call) {
  if (fake.fail_nth > 0 && strcmp(call, fake.fail_call) == 0 && --fake.fail_nth == 0) {
    fake_message("fake %s: injected error %d", call, fake.fail_code);
    return fake.fail_code;
  }
  return 0;
}

static void* fake_stream_main(void* p);

static struct fake_stream* fake_stream_new(int device) {
  struct fake_stream* s = calloc(1, sizeof(*s));
  if (s == NULL) {
    return NULL;
  }
  s->device = device;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cond, NULL);
  if (pthread_create(&s->thread, NULL, fake_stream_main, s) != 0) {
    free(s);
    return NULL;
  }
  return s;
}

static void fake_stream_free(struct fake_stream* s) {
  pthread_mutex_lock(&s->mu);
  s->stop = 1;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->mu);
  pthread_join(s->thread, NULL);
  pthread_cond_destroy(&s->cond);
  pthread_mutex_destroy(&s->mu);
  free(s->queue);
  free(s);
}

static void* fake_stream_main(void* p) {
  struct fake_stream* s = p;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (s->head == s->len && !s->stop) {
      s->head = s->len = 0;
      s->busy = 0;
      pthread_cond_broadcast(&s->cond);
      pthread_cond_wait(&s->cond, &s->mu);
    }
    if (s->head == s->len) { /* stop, and nothing left */
      break;
    }
    struct fake_task t = s->queue[s->head++];
    pthread_mutex_unlock(&s->mu);
    long delay = __atomic_load_n(&fake.delay_us, __ATOMIC_RELAXED);
    if (delay > 0) {
      usleep((useconds_t)delay);
    }
    memcpy(t.dst, t.src, t.n);
    pthread_mutex_lock(&s->mu);
  }
  s->busy = 0;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

static int fake_stream_push(struct fake_stream* s, struct fake_task t) {
  pthread_mutex_lock(&s->mu);
  if (s->len == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 64;
    struct fake_task* q = realloc(s->queue, cap * sizeof(*q));
    if (q == NULL) {
      pthread_mutex_unlock(&s->mu);
      return -1;
    }
    s->queue = q;
    s->cap = cap;
  }
  s->queue[s->len++] = t;
  s->busy = 1;
  pthread_cond_broadcast(&s->cond);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

static void fake_stream_wait(struct fake_stream* s) {
  pthread_mutex_lock(&s->mu);
  while (s->busy) {
    pthread_cond_wait(&s->cond, &s->mu);
  }
  pthread_mutex_unlock(&s->mu);
}

static uint64_t fake_stream_pending(struct fake_stream* s) {
  pthread_mutex_lock(&s->mu);
  uint64_t n = s->len - s->head;
  if (s->busy && n == 0) {
    n = 1; /* the one running */
  }
  pthread_mutex_unlock(&s->mu);
  return n;
}

static void fake_read_env(void) {
  const char* v = getenv("FAKE_RUNTIME_DELAY_US");
  if (v != NULL) {
    fake.delay_us = atol(v);
  }
  v = getenv("FAKE_RUNTIME_FAIL");
  if (v != NULL) {
    char call[64];
    long nth;
    int code;
    if (sscanf(v, "%63[^:]:%ld:%d", call, &nth, &code) == 3) {
      snprintf(fake.fail_call, sizeof(fake.fail_call), "%s", call);
      fake.fail_nth = nth;
      fake.fail_code = code;
    }
  }
  v = getenv("FAKE_ACL_STRICT_ALIGN");
  fake.strict_align = v != NULL && strcmp(v, "1") == 0;
}

/* fake_setup maps the device memory and reads the environment; called by
 * each double's constructor. */
static void fake_setup(const struct fake_codes* codes, int require_init) {
  fake.codes = codes;
  fake.require_init = require_init;
  fake_read_env();
  const char* v = getenv("FAKE_DEVICE_HEAP_MB");
  fake.heap_size = (size_t)(v != NULL ? atol(v) : 1024) << 20;
  int fd = memfd_create("gohccl-fake-device", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)fake.heap_size) != 0) {
    perror("fake runtime: device memory");
    abort();
  }
  fake.dev_view = mmap(NULL, fake.heap_size, PROT_NONE, MAP_SHARED, fd, 0);
  fake.dev_rw = mmap(NULL, fake.heap_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (fake.dev_view == MAP_FAILED || fake.dev_rw == MAP_FAILED) {
    perror("fake runtime: mmap");
    abort();
  }
}

/* fake_current is the calling thread's device (CUDA threads start on
 * device 0; ACL threads on none, -1). */
static int fake_current(void) {
  if (fake_thread_device == -2) {
    return fake.require_init ? -1 : 0;
  }
  return fake_thread_device;
}

static int fake_set_device(const char* call, int dev) {
  pthread_mutex_lock(&fake.mu);
  int rc = fake_enter(call);
  if (rc == 0 && fake.require_init && !fake.initialized) {
    rc = fake_refuse(fake.codes->uninitialized, "%s(%d) before aclInit", call, dev);
  }
  if (rc == 0 && (dev < 0 || dev >= FAKE_DEVICES)) {
    rc = fake_refuse(fake.codes->invalid_device, "%s(%d): no such device", call, dev);
  }
  if (rc == 0) {
    fake_thread_device = dev;
  }
  pthread_mutex_unlock(&fake.mu);
  return rc;
}

static int fake_get_device(const char* call, int* dev) {
  pthread_mutex_lock(&fake.mu);
  int rc = fake_enter(call);
  if (rc == 0 && dev == NULL) {
    rc = fake_refuse(fake.codes->invalid_value, "%s(NULL)", call);
  }
  if (rc == 0 && fake_current() < 0) {
    fake_message("%s: no device set on this thread", call);
    rc = fake.codes->no_device; /* not a violation: gohccl asks to find out */
  }
  if (rc == 0) {
    *dev = fake_current();
  }
  pthread_mutex_unlock(&fake.mu);
  return rc;
}

/* fake_find returns the block of list holding [addr, addr+n), or NULL. */
static struct fake_block* fake_find(struct fake_block* list, uintptr_t addr, size_t n) {
  for (struct fake_block* b = list; b != NULL; b = b->next) {
    if (addr >= b->addr && addr + n <= b->addr + b->size && addr + n >= addr) {
      return b;
    }
  }
  return NULL;
}

static void* fake_rw(uintptr_t dev_addr) { return fake.dev_rw + (dev_addr - (uintptr_t)fake.dev_view); }

/* fake_malloc allocates device memory on the calling thread's device:
 * first fit, 256-byte aligned, in address order. */
static int fake_malloc(const char* call, void** p, size_t n) {
  pthread_mutex_lock(&fake.mu);
  int rc = fake_enter(call);
  int dev = fake_current();
  if (rc == 0 && (p == NULL || n == 0)) {
    rc = fake_refuse(fake.codes->invalid_value, "%s of %zu bytes", call, n);
  }
  if (rc == 0 && dev < 0) {
    rc = fake_refuse(fake.codes->no_device, "%s on a thread with no device", call);
  }
  if (rc == 0) {
    size_t size = (n + 255) & ~(size_t)255;
    uintptr_t at = (uintptr_t)fake.dev_view;
    struct fake_block** link = &fake.dev;
    while (*link != NULL && (*link)->addr < at + size) {
      at = ((*link)->addr + (*link)->size + 255) & ~(uintptr_t)255;
      link = &(*link)->next;
    }
    struct fake_block* b = calloc(1, sizeof(*b));
    if (at + size > (uintptr_t)fake.dev_view + fake.heap_size || b == NULL) {
      free(b);
      rc = fake.codes->out_of_memory;
    } else {
      *b = (struct fake_block){at, n, dev, *link};
      *link = b;
      *p = (void*)at;
      fake.live_device++;
    }
  }
  pthread_mutex_unlock(&fake.mu);
  return rc;
}

static int fake_free(const char* call, void* p) {
  pthread_mutex_lock(&fake.mu);
  int rc = fake_enter(call);
  struct fake_block** link = &fake.dev;
  while (rc == 0 && *link != NULL && (*link)->addr != (uintptr_t)p) {
    link = &(*link)->next;
  }
  if (rc == 0 && *link == NULL) {
    rc = fake_refuse(fake.codes->invalid_value, "%s(%p): not a device allocation", call, p);
  }
  if (rc == 0) {
    struct fake_block* b = *link;
    *link = b->next;
    free(b);
    fake.live_device--;
  }
  pthread_mutex_unlock(&fake.mu);
  return rc;
}

static int fake_malloc_host(const char* call, void** p, size_t n) {
  pthread_mutex_lock(&fake.mu);
  int rc = fake_enter(call);
  void* mem = NULL;
  if (rc == 0 && (p == NULL || n == 0)) {
    rc = fake_refuse(fake.codes->invalid_value, "%s of %zu bytes", call, n);
  }
  if (rc == 0 && fake.require_init && !fake.initialized) {
    rc = fake_refuse(fake.codes->uninitialized, "%s before aclInit", call);
  }
  struct fake_block* b = NULL;
  if (rc == 0 && (posix_memalign(&mem, 64, n) != 0 || (b = calloc(1, sizeof(*b))) == NULL)) {
    free(mem);
    rc = fake.codes->out_of_memory;
  }
  if (rc == 0) {
    *b = (struct fake_block){(uintptr_t)mem, n, -1, fake.pinned};
    fake.pinned = b;
    fake.live_pinned++;
    *p = mem;
  }
  pthread_mutex_unlock(&fake.mu);
  return rc;
}

static int fake_free_host(const char* call, void* p) {
  pthread_mutex_lock(&fake.mu);
  int rc = fake_enter(call);
  struct fake_block** link = &fake.pinned;
  while (rc == 0 && *link != NULL && (*link)->addr != (uintptr_t)p) {
    link = &(*link)->next;
  }
  if (rc == 0 && *link == NULL) {
    rc = fake_refuse(fake.codes->invalid_value, "%s(%p): not a pinned allocation", call, p);
  }
  if (rc == 0) {
    for (struct fake_stream* s = fake.streams; s != NULL; s = s->next) {
      if (fake_stream_pending(s) > 0) {
        fake_refuse(0, "%s while copies are still queued on a stream", call);
      }
    }
    struct fake_block* b = *link;
    *link = b->next;
    free((void*)b->addr);
    free(b);
    fake.live_pinned--;
  }
  pthread_mutex_unlock(&fake.mu);
  return rc;
}

/* fake_stream_of returns the stream behind handle (NULL: the default
 * stream), or NULL if the handle is unknown; the caller holds fake.mu. */
static struct fake_stream* fake_stream_of(void* handle) {
  if (handle == NULL) {
    if (fake.default_stream == NULL) {
      fake.default_stream = fake_stream_new(-1);
      if (fake.default_stream != NULL) {
        fake.default_stream->next = fake.streams;
        fake.streams = fake.default_stream;
      }
    }
    return fake.default_stream;
  }
  for (struct fake_stream* s = fake.streams; s != NULL; s = s->next) {
    if ((void*)s == handle) {
      return s;
    }
  }
  return NULL;
}

static int fake_stream_create(const char* call, void** handle) {
  pthread_mutex_lock(&fake.mu);
  int rc = fake_enter(call);
  if (rc == 0 && (handle == NULL || fake_current() < 0)) {
    rc = fake_refuse(fake.codes->invalid_value, "%s with no handle or no device", call);
  }
  if (rc == 0) {
    struct fake_stream* s = fake_stream_new(fake_current());
    if (s == NULL) {
      rc = fake.codes->out_of_memory;
    } else {
      s->next = fake.streams;
      fake.streams = s;
      *handle = s;
    }
  }
  pthread_mutex_unlock(&fake.mu);
  return rc;
}

static int fake_stream_destroy(const char* call, void* handle) {
  pthread_mutex_lock(&fake.mu);
  int rc = fake_enter(call);
  struct fake_stream** link = &fake.streams;
  while (rc == 0 && *link != NULL && (void*)*link != handle) {
    link = &(*link)->next;
  }
  if (rc == 0 && (*link == NULL || handle == NULL)) {
    rc = fake_refuse(fake.codes->bad_stream, "%s(%p): unknown stream", call, handle);
  }
  struct fake_stream* s = NULL;
  if (rc == 0) {
    s = *link;
    *link = s->next;
  }
  pthread_mutex_unlock(&fake.mu);
  if (s != NULL) {
    fake_stream_free(s); /* runs what is queued, then stops */
  }
  return rc;
}

/* fake_memcpy_async checks one asynchronous copy and queues it. */
static int fake_memcpy_async(const char* call, void* dst, size_t dest_max, const void* src, size_t n,
                             int kind, void* handle) {
  pthread_mutex_lock(&fake.mu);
  int rc = fake_enter(call);
  int dev = fake_current();
  const struct fake_codes* c = fake.codes;
  struct fake_stream* s = NULL;
  uintptr_t d_addr = 0, h_addr = 0;
  if (rc == 0 && fake.require_init && !fake.initialized) {
    rc = fake_refuse(c->uninitialized, "%s before aclInit", call);
  }
  if (rc == 0 && dev < 0) {
    rc = fake_refuse(c->no_device, "%s on a thread with no device set", call);
  }
  if (rc == 0 && (n == 0 || dest_max < n)) {
    rc = fake_refuse(c->invalid_value, "%s: count %zu, destination room %zu", call, n, dest_max);
  }
  if (rc == 0 && kind != FAKE_KIND_HOST_TO_DEVICE && kind != FAKE_KIND_DEVICE_TO_HOST) {
    rc = fake_refuse(c->invalid_value, "%s: kind %d (gohccl copies host to device, 1, and device to host, 2)", call, kind);
  }
  if (rc == 0) {
    d_addr = (uintptr_t)(kind == FAKE_KIND_HOST_TO_DEVICE ? dst : src);
    h_addr = (uintptr_t)(kind == FAKE_KIND_HOST_TO_DEVICE ? src : dst);
    struct fake_block* db = fake_find(fake.dev, d_addr, n);
    if (db == NULL) {
      rc = fake_refuse(c->bad_address, "%s kind %d: %zu bytes at %p are not in one device allocation", call, kind, n, (void*)d_addr);
    } else if (db->device != dev) {
      rc = fake_refuse(c->invalid_value, "%s: memory of device %d copied on a thread of device %d", call, db->device, dev);
    } else if (fake_find(fake.pinned, h_addr, n) == NULL) {
      rc = fake_refuse(c->invalid_value, "%s kind %d: %zu bytes at %p are not in one pinned allocation", call, kind, n, (void*)h_addr);
    }
  }
  if (rc == 0 && (d_addr % 64 != 0 || h_addr % 64 != 0)) {
    fake.unaligned++;
    if (fake.strict_align) {
      rc = fake_refuse(c->invalid_value, "%s: address %p or %p not 64-byte aligned", call, (void*)d_addr, (void*)h_addr);
    }
  }
  if (rc == 0 && (s = fake_stream_of(handle)) == NULL) {
    rc = fake_refuse(c->bad_stream, "%s: unknown stream %p", call, handle);
  }
  if (rc == 0 && s->device >= 0 && s->device != dev) {
    rc = fake_refuse(c->bad_stream, "%s: a stream of device %d used on a thread of device %d", call, s->device, dev);
  }
  if (rc == 0) {
    struct fake_task t = {dst, src, n};
    if (kind == FAKE_KIND_HOST_TO_DEVICE) {
      t.dst = fake_rw(d_addr);
      fake.bytes_up += n;
    } else {
      t.src = fake_rw(d_addr);
      fake.bytes_down += n;
    }
    fake.copies++;
    if (fake_stream_push(s, t) != 0) {
      rc = c->out_of_memory;
    }
  }
  pthread_mutex_unlock(&fake.mu);
  return rc;
}

/* fake_memcpy is the synchronous copy tests use to fill and read device
 * memory: any host memory, kinds 1 and 2; not counted. */
static int fake_memcpy(const char* call, void* dst, size_t dest_max, const void* src, size_t n, int kind) {
  pthread_mutex_lock(&fake.mu);
  int rc = fake_enter(call);
  uintptr_t d_addr = (uintptr_t)(kind == FAKE_KIND_HOST_TO_DEVICE ? dst : src);
  if (rc == 0 && (dest_max < n || (kind != FAKE_KIND_HOST_TO_DEVICE && kind != FAKE_KIND_DEVICE_TO_HOST))) {
    rc = fake_refuse(fake.codes->invalid_value, "%s: kind %d, count %zu, room %zu", call, kind, n, dest_max);
  }
  if (rc == 0 && n > 0 && fake_find(fake.dev, d_addr, n) == NULL) {
    rc = fake_refuse(fake.codes->bad_address, "%s: %zu bytes at %p are not device memory", call, n, (void*)d_addr);
  }
  pthread_mutex_unlock(&fake.mu);
  if (rc == 0 && n > 0) {
    if (kind == FAKE_KIND_HOST_TO_DEVICE) {
      memcpy(fake_rw(d_addr), src, n);
    } else {
      memcpy(dst, fake_rw(d_addr), n);
    }
  }
  return rc;
}

static int fake_synchronize(const char* call, void* handle) {
  pthread_mutex_lock(&fake.mu);
  int rc = fake_enter(call);
  struct fake_stream* s = NULL;
  if (rc == 0 && (s = fake_stream_of(handle)) == NULL) {
    rc = fake_refuse(fake.codes->bad_stream, "%s: unknown stream %p", call, handle);
  }
  if (rc == 0) {
    fake.syncs++;
  }
  pthread_mutex_unlock(&fake.mu);
  if (s != NULL) {
    fake_stream_wait(s);
  }
  return rc;
}

/* The controls (fake_control.h). */

static void fake_read_counters(fake_counters* out) {
  pthread_mutex_lock(&fake.mu);
  *out = (fake_counters){.bytes_down = fake.bytes_down, .bytes_up = fake.bytes_up, .copies = fake.copies,
                         .syncs = fake.syncs, .live_pinned = fake.live_pinned, .live_device = fake.live_device,
                         .violations = fake.violations, .unaligned = fake.unaligned};
  for (struct fake_stream* s = fake.streams; s != NULL; s = s->next) {
    out->pending += fake_stream_pending(s);
  }
  pthread_mutex_unlock(&fake.mu);
}

static void fake_reset(void) {
  pthread_mutex_lock(&fake.mu);
  fake.bytes_down = fake.bytes_up = fake.copies = fake.syncs = fake.violations = fake.unaligned = 0;
  fake.last_violation[0] = '\0';
  pthread_mutex_unlock(&fake.mu);
}

static void fake_inject(const char* call, long nth, int code) {
  pthread_mutex_lock(&fake.mu);
  snprintf(fake.fail_call, sizeof(fake.fail_call), "%s", call);
  fake.fail_nth = nth;
  fake.fail_code = code;
  pthread_mutex_unlock(&fake.mu);
}

static void fake_set_delay(long us) { __atomic_store_n(&fake.delay_us, us, __ATOMIC_RELAXED); }

static const char* fake_last_violation(void) { return fake.last_violation; }

#endif
