/*
 * abi_test: exercises libgohccl through its C ABI (capi/include/gohccl.h)
 * alone, the way a C caller would.
 *
 * Every group of N ranks runs as N threads of this process, each with its own
 * communicator, rendezvousing through an in-process store (a locked key-value
 * list) behind gohccl_store_ops. For N = 1..4 each rank checks its handle's
 * rank and size, all-reduces float32 and int64 buffers of several counts
 * against sums it computes itself, passes a barrier, and finally checks that
 * an invalid dtype is refused with GOHCCL_ERR_INVALID and a message, then
 * destroys its communicator.
 *
 * It prints one line per failure and ends with "abi_test: N passed, M failed";
 * the exit status is 0 only when nothing failed.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gohccl.h"

#define ERR_LEN 4096
#define MAX_RANKS 4
#define TIMEOUT_MS 60000

static pthread_mutex_t report_mu = PTHREAD_MUTEX_INITIALIZER;
static int passed;
static int failed;

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

/* ---- An in-process store: what c10d::Store is to the torch shim. ---- */

struct entry {
  char* key;
  uint8_t* value;
  size_t len;
  struct entry* next;
};

struct store {
  pthread_mutex_t mu;
  pthread_cond_t changed;
  struct entry* entries;
};

static void store_init(struct store* s) {
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->changed, NULL);
  s->entries = NULL;
}

static void store_free(struct store* s) {
  struct entry* e = s->entries;
  while (e != NULL) {
    struct entry* next = e->next;
    free(e->key);
    free(e->value);
    free(e);
    e = next;
  }
  pthread_cond_destroy(&s->changed);
  pthread_mutex_destroy(&s->mu);
}

/* find returns the entry for key; the caller holds s->mu. */
static struct entry* find(struct store* s, const char* key) {
  for (struct entry* e = s->entries; e != NULL; e = e->next) {
    if (strcmp(e->key, key) == 0) {
      return e;
    }
  }
  return NULL;
}

/* put replaces key's value with a copy of value; the caller holds s->mu. */
static int put(struct store* s, const char* key, const uint8_t* value,
               size_t len) {
  struct entry* e = find(s, key);
  uint8_t* copy = malloc(len > 0 ? len : 1);
  if (copy == NULL) {
    return -1;
  }
  if (len > 0) {
    memcpy(copy, value, len);
  }
  if (e == NULL) {
    e = calloc(1, sizeof(*e));
    if (e == NULL || (e->key = strdup(key)) == NULL) {
      free(e);
      free(copy);
      return -1;
    }
    e->next = s->entries;
    s->entries = e;
  } else {
    free(e->value);
  }
  e->value = copy;
  e->len = len;
  pthread_cond_broadcast(&s->changed);
  return 0;
}

static void set_err(char* err, size_t err_len, const char* msg,
                    const char* key) {
  if (err != NULL && err_len > 0) {
    snprintf(err, err_len, "test store: %s %s", msg, key);
  }
}

static int store_set(void* ctx, const char* key, const uint8_t* value,
                     size_t len, char* err, size_t err_len) {
  struct store* s = ctx;
  pthread_mutex_lock(&s->mu);
  int rc = put(s, key, value, len);
  pthread_mutex_unlock(&s->mu);
  if (rc != 0) {
    set_err(err, err_len, "out of memory setting", key);
  }
  return rc;
}

static int store_get(void* ctx, const char* key, int64_t timeout_ms,
                     uint8_t** value, size_t* len, char* err,
                     size_t err_len) {
  struct store* s = ctx;
  struct timespec deadline;
  if (timeout_ms <= 0) {
    timeout_ms = TIMEOUT_MS;
  }
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += timeout_ms / 1000;
  deadline.tv_nsec += (timeout_ms % 1000) * 1000000L;
  if (deadline.tv_nsec >= 1000000000L) {
    deadline.tv_sec++;
    deadline.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&s->mu);
  struct entry* e;
  while ((e = find(s, key)) == NULL) {
    if (pthread_cond_timedwait(&s->changed, &s->mu, &deadline) == ETIMEDOUT) {
      pthread_mutex_unlock(&s->mu);
      set_err(err, err_len, "timed out waiting for", key);
      return 1;
    }
  }
  uint8_t* copy = malloc(e->len > 0 ? e->len : 1);
  if (copy != NULL && e->len > 0) {
    memcpy(copy, e->value, e->len);
  }
  *len = e->len;
  pthread_mutex_unlock(&s->mu);
  if (copy == NULL) {
    set_err(err, err_len, "out of memory getting", key);
    return 1;
  }
  *value = copy;
  return 0;
}

/* Integers are stored as decimal text, as c10d stores keep them. */
static int store_add(void* ctx, const char* key, int64_t delta, int64_t* out,
                     char* err, size_t err_len) {
  struct store* s = ctx;
  char text[32];
  int64_t v = 0;
  pthread_mutex_lock(&s->mu);
  struct entry* e = find(s, key);
  if (e != NULL) {
    size_t n = e->len < sizeof(text) - 1 ? e->len : sizeof(text) - 1;
    memcpy(text, e->value, n);
    text[n] = '\0';
    v = strtoll(text, NULL, 10);
  }
  v += delta;
  int n = snprintf(text, sizeof(text), "%lld", (long long)v);
  int rc = put(s, key, (const uint8_t*)text, (size_t)n);
  pthread_mutex_unlock(&s->mu);
  if (rc != 0) {
    set_err(err, err_len, "out of memory adding to", key);
    return rc;
  }
  *out = v;
  return 0;
}

static const gohccl_store_ops store_ops = {store_set, store_get, store_add};

/* ---- One rank ---- */

struct rank_args {
  struct store* store;
  int rank;
  int size;
};

static const uint64_t counts[] = {1, 7, 1024, 100003};

static void check_allreduce_f32(gohccl_comm comm, int rank, int size,
                                uint64_t count) {
  float* buf = malloc(count * sizeof(float));
  char err[ERR_LEN] = "";
  /* Small integers: every sum is exact in float32, in any order. */
  for (uint64_t i = 0; i < count; i++) {
    buf[i] = (float)(rank + (int)(i % 7));
  }
  gohccl_status st = gohccl_allreduce(comm, buf, count, GOHCCL_FLOAT32,
                                      GOHCCL_SUM, TIMEOUT_MS, err, sizeof(err));
  check(st == GOHCCL_OK, "size %d rank %d: float32 allreduce of %llu: status %d: %s",
        size, rank, (unsigned long long)count, st, err);
  if (st == GOHCCL_OK) {
    uint64_t bad = 0;
    for (uint64_t i = 0; i < count; i++) {
      float want = (float)(size * (int)(i % 7) + size * (size - 1) / 2);
      if (buf[i] != want) {
        if (bad == 0) {
          check(0, "size %d rank %d: float32 allreduce of %llu: element %llu is %g, want %g",
                size, rank, (unsigned long long)count, (unsigned long long)i,
                buf[i], want);
        }
        bad++;
      }
    }
    check(bad == 0, "size %d rank %d: float32 allreduce of %llu: %llu wrong elements",
          size, rank, (unsigned long long)count, (unsigned long long)bad);
  }
  free(buf);
}

static void check_allreduce_i64_max(gohccl_comm comm, int rank, int size,
                                    uint64_t count) {
  int64_t* buf = malloc(count * sizeof(int64_t));
  char err[ERR_LEN] = "";
  for (uint64_t i = 0; i < count; i++) {
    buf[i] = (int64_t)rank * 1000000 + (int64_t)i;
  }
  gohccl_status st = gohccl_allreduce(comm, buf, count, GOHCCL_INT64,
                                      GOHCCL_MAX, TIMEOUT_MS, err, sizeof(err));
  check(st == GOHCCL_OK, "size %d rank %d: int64 MAX allreduce of %llu: status %d: %s",
        size, rank, (unsigned long long)count, st, err);
  if (st == GOHCCL_OK) {
    uint64_t bad = 0;
    for (uint64_t i = 0; i < count; i++) {
      if (buf[i] != (int64_t)(size - 1) * 1000000 + (int64_t)i) {
        bad++;
      }
    }
    check(bad == 0, "size %d rank %d: int64 MAX allreduce of %llu: %llu wrong elements",
          size, rank, (unsigned long long)count, (unsigned long long)bad);
  }
  free(buf);
}

static void* run_rank(void* p) {
  struct rank_args* a = p;
  char err[ERR_LEN] = "";
  gohccl_comm comm = 0;
  gohccl_status st = gohccl_comm_create(&store_ops, a->store, a->rank, a->size,
                                        TIMEOUT_MS, &comm, err, sizeof(err));
  check(st == GOHCCL_OK, "size %d rank %d: comm_create: status %d: %s",
        a->size, a->rank, st, err);
  if (st != GOHCCL_OK) {
    return NULL;
  }
  check(gohccl_comm_rank(comm) == a->rank, "size %d rank %d: comm_rank is %d",
        a->size, a->rank, gohccl_comm_rank(comm));
  check(gohccl_comm_size(comm) == a->size, "size %d rank %d: comm_size is %d",
        a->size, a->rank, gohccl_comm_size(comm));
  if (a->rank == 0) {
    char desc[ERR_LEN] = "";
    st = gohccl_comm_describe(comm, desc, sizeof(desc));
    check(st == GOHCCL_OK && desc[0] != '\0',
          "size %d: comm_describe: status %d, %s", a->size, st, desc);
    printf("size %d: %s\n", a->size, desc);
  }

  for (size_t i = 0; i < sizeof(counts) / sizeof(counts[0]); i++) {
    check_allreduce_f32(comm, a->rank, a->size, counts[i]);
    check_allreduce_i64_max(comm, a->rank, a->size, counts[i]);
  }

  err[0] = '\0';
  st = gohccl_barrier(comm, TIMEOUT_MS, err, sizeof(err));
  check(st == GOHCCL_OK, "size %d rank %d: barrier: status %d: %s", a->size,
        a->rank, st, err);

  if (a->rank == 0) {
    /* The flight record of every live communicator, this one among them. */
    char dir[] = "/tmp/gohccl-abi-trace-XXXXXX";
    char paths[4096] = "";
    err[0] = '\0';
    check(mkdtemp(dir) != NULL, "mkdtemp failed");
    st = gohccl_trace_dump(dir, paths, sizeof(paths), err, sizeof(err));
    check(st == GOHCCL_OK && strstr(paths, "_rank0_") != NULL && strstr(paths, dir) == paths,
          "size %d: trace_dump: status %d, paths \"%s\": %s", a->size, st, paths, err);
    FILE* f = fopen(strtok(paths, "\n"), "r");
    char head[256] = "";
    check(f != NULL && fread(head, 1, sizeof(head) - 1, f) > 0 && strstr(head, "\"version\": 1") != NULL,
          "size %d: the dump does not start with its version: %s", a->size, head);
    if (f != NULL) {
      fclose(f);
    }
    for (char* path = paths; path != NULL && *path != '\0'; path = strtok(NULL, "\n")) {
      unlink(path);
    }
    rmdir(dir);
  }

  /* Last, since a failure may leave the communicator broken. */
  float x = 1.0f;
  err[0] = '\0';
  st = gohccl_allreduce(comm, &x, 1, (gohccl_dtype)99, GOHCCL_SUM, TIMEOUT_MS,
                        err, sizeof(err));
  check(st == GOHCCL_ERR_INVALID,
        "size %d rank %d: allreduce with dtype 99: status %d, want GOHCCL_ERR_INVALID (%d)",
        a->size, a->rank, st, GOHCCL_ERR_INVALID);
  check(err[0] != '\0', "size %d rank %d: allreduce with dtype 99 gave no message",
        a->size, a->rank);
  check(strlen(err) < sizeof(err), "size %d rank %d: message not terminated",
        a->size, a->rank);

  st = gohccl_comm_destroy(comm);
  check(st == GOHCCL_OK, "size %d rank %d: comm_destroy: status %d", a->size,
        a->rank, st);
  check(gohccl_comm_rank(comm) == -1,
        "size %d rank %d: comm_rank of a destroyed handle is %d, want -1",
        a->size, a->rank, gohccl_comm_rank(comm));
  return NULL;
}

static void run_group(int size) {
  struct store store;
  pthread_t threads[MAX_RANKS];
  struct rank_args args[MAX_RANKS];
  store_init(&store);
  for (int r = 0; r < size; r++) {
    args[r] = (struct rank_args){&store, r, size};
    if (pthread_create(&threads[r], NULL, run_rank, &args[r]) != 0) {
      check(0, "size %d: cannot start the thread of rank %d", size, r);
      size = r;
      break;
    }
  }
  for (int r = 0; r < size; r++) {
    pthread_join(threads[r], NULL);
  }
  store_free(&store);
}

static void check_invalid_create(int rank, int size) {
  struct store store;
  char err[ERR_LEN] = "";
  gohccl_comm comm = 0;
  store_init(&store);
  gohccl_status st = gohccl_comm_create(&store_ops, &store, rank, size,
                                        TIMEOUT_MS, &comm, err, sizeof(err));
  check(st != GOHCCL_OK, "comm_create(rank %d, size %d) succeeded", rank, size);
  check(err[0] != '\0', "comm_create(rank %d, size %d) failed (%d) without a message",
        rank, size, st);
  printf("comm_create(rank %d, size %d): status %d: %s\n", rank, size, st, err);
  if (st == GOHCCL_OK) {
    gohccl_comm_destroy(comm);
  }
  store_free(&store);
}

int main(void) {
  const char* version = gohccl_version();
  check(version != NULL && version[0] != '\0', "gohccl_version is empty");
  printf("libgohccl %s, ABI %d\n", version ? version : "(null)",
         gohccl_abi_version());
  check(gohccl_abi_version() == GOHCCL_ABI_VERSION,
        "gohccl_abi_version is %d, the header says %d", gohccl_abi_version(),
        GOHCCL_ABI_VERSION);
  check(gohccl_comm_rank(0xdeadbeef) == -1, "comm_rank of an unknown handle is not -1");
  check(gohccl_comm_size(0xdeadbeef) == -1, "comm_size of an unknown handle is not -1");

  check_invalid_create(0, 0);
  check_invalid_create(2, 2);
  check_invalid_create(-1, 2);

  for (int size = 1; size <= MAX_RANKS; size++) {
    run_group(size);
  }

  printf("abi_test: %d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
