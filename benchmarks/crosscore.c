// crosscore: how fast one process reads what another just wrote, the
// measurement behind the mesh engine's depth and ahead (docs/mesh.md).
//
//   crosscore ring CHUNK ITERS SLOTS
//       A producer copies CHUNK bytes into slot k % SLOTS of a shared ring
//       and publishes k; a consumer (a forked child) copies each slot out and
//       releases it. Prints the rate. With few slots the consumer reads lines
//       still in the producer's L2; with a ring larger than that L2 it reads
//       them from L3.
//   crosscore oneshot BYTES CHUNK DEPTH AHEAD ITERS
//       Two processes run the mesh engine's one-shot float32 all-reduce
//       schedule on BYTES per rank: each copies CHUNK-byte chunks of its
//       buffer into its slot k % DEPTH, AHEAD chunks before it adds the
//       peer's slot of chunk k into its buffer. Prints the time per op.
//   crosscore pair BYTES CHUNK DEPTH AHEAD ITERS
//       An asymmetric two-rank all-reduce, a schedule considered for the
//       mesh engine and not taken (docs/mesh.md, "Measured"): rank 0 copies
//       its chunks in AHEAD chunks ahead and copies each result out; rank 1
//       adds rank 0's chunk to its own and writes the sum both to its buffer
//       and to its slot, so each rank moves 4 bytes per byte of input
//       instead of one-shot's 5, at the price of a second wait for rank 0.
//
// Build: cc -O3 -march=native -o build/crosscore benchmarks/crosscore.c
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
  _Atomic long v;
  char pad[56];
} counter;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void await(counter* c, long v) {
  while (atomic_load_explicit(&c->v, memory_order_acquire) < v) {
    _mm_pause();
  }
}

static void publish(counter* c, long v) {
  atomic_store_explicit(&c->v, v, memory_order_release);
}

static void* shared(size_t n) {
  void* m = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    perror("mmap");
    exit(1);
  }
  memset(m, 0, n);
  return m;
}

static int ring(size_t chunk, long iters, long slots) {
  char* m = shared(4096 + (size_t)slots * chunk);
  counter *ready = (counter*)m, *freed = ready + 1;
  char* data = m + 4096;
  char* src = aligned_alloc(64, chunk);
  memset(src, 3, chunk);
  pid_t child = fork();
  if (child == 0) {
    char* dst = aligned_alloc(64, chunk);
    for (long k = 0; k < iters; k++) {
      await(ready, k + 1);
      memcpy(dst, data + (k % slots) * chunk, chunk);
      publish(freed, k + 1);
    }
    _exit(0);
  }
  double t0 = now();
  for (long k = 0; k < iters; k++) {
    if (k >= slots) {
      await(freed, k + 1 - slots);
    }
    memcpy(data + (k % slots) * chunk, src, chunk);
    publish(ready, k + 1);
  }
  await(freed, iters);
  double t = now() - t0;
  waitpid(child, NULL, 0);
  printf("ring chunk %zu slots %ld: %.2f GB/s, %.2f us per chunk\n", chunk, slots,
         chunk * iters / t / 1e9, t / iters * 1e6);
  return 0;
}

// A two-process all-reduce schedule: me is 0 in the parent and 1 in the
// child, ready[r] and freed[r] are rank r's counters, slots rank r's depth
// chunk-sized buffers.
typedef struct {
  size_t bytes, chunk;
  long depth, ahead, chunks;
  int me;
  counter *ready, *freed;
  char* data;
  float* buf;
} pair_run;

#define SLOT(r, k) (x->data + ((r) * x->depth + (k) % x->depth) * x->chunk)

// extent is the byte length of chunk i.
static size_t extent(const pair_run* x, long i) {
  size_t off = i * x->chunk;
  return off + x->chunk > x->bytes ? x->bytes - off : x->chunk;
}

// post copies chunks up to i + ahead into this rank's slots, once each
// slot's previous chunk was released by the peer.
static void post(pair_run* x, long base, long i, long* posted) {
  for (; *posted < x->chunks && *posted <= i + x->ahead; (*posted)++) {
    long k = base + *posted;
    if (k >= x->depth) {
      await(&x->freed[1 - x->me], k + 1 - x->depth);
    }
    memcpy(SLOT(x->me, k), (char*)x->buf + *posted * x->chunk, extent(x, *posted));
    publish(&x->ready[x->me], k + 1);
  }
}

// oneshot_chunk: both ranks post ahead and add the peer's chunk i.
static void oneshot_chunk(pair_run* x, long base, long i, long* posted) {
  post(x, base, i, posted);
  long k = base + i;
  await(&x->ready[1 - x->me], k + 1);
  float* d = (float*)((char*)x->buf + i * x->chunk);
  const float* p = (const float*)SLOT(1 - x->me, k);
  for (size_t j = 0; j < extent(x, i) / 4; j++) {
    d[j] += p[j];
  }
  publish(&x->freed[x->me], k + 1);
}

// asym_chunk: rank 0 posts ahead and copies the sum out; rank 1 adds and
// writes the sum to its buffer and its slot.
static void asym_chunk(pair_run* x, long base, long i, long* posted) {
  long k = base + i;
  float* d = (float*)((char*)x->buf + i * x->chunk);
  if (x->me == 0) {
    post(x, base, i, posted);
    await(&x->ready[1], k + 1);
    memcpy(d, SLOT(1, k), extent(x, i));
    publish(&x->freed[0], k + 1);
    return;
  }
  await(&x->ready[0], k + 1);
  if (k >= x->depth) {
    await(&x->freed[0], k + 1 - x->depth);
  }
  const float* p = (const float*)SLOT(0, k);
  float* o = (float*)SLOT(1, k);
  for (size_t j = 0; j < extent(x, i) / 4; j++) {
    float sum = p[j] + d[j];
    d[j] = sum;
    o[j] = sum;
  }
  publish(&x->freed[1], k + 1);
  publish(&x->ready[1], k + 1);
}

static int two_ranks(const char* name, void (*step)(pair_run*, long, long, long*), size_t bytes,
                     size_t chunk, long depth, long ahead, int iters) {
  if (ahead >= depth || chunk % 4 != 0) {
    fprintf(stderr, "%s: need AHEAD < DEPTH and CHUNK a multiple of 4\n", name);
    return 2;
  }
  pair_run run = {.bytes = bytes, .chunk = chunk, .depth = depth, .ahead = ahead,
                  .chunks = (long)((bytes + chunk - 1) / chunk)};
  pair_run* x = &run;
  char* m = shared(4096 + 2 * (size_t)depth * chunk);
  x->ready = (counter*)m;
  x->freed = x->ready + 2;
  x->data = m + 4096;
  pid_t child = fork();
  x->me = child == 0;
  x->buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
  for (size_t i = 0; i < bytes / 4; i++) {
    x->buf[i] = 1;
  }
  double t0 = 0;
  const int warm = 5;
  long base = 0;
  for (int it = 0; it < iters + warm; it++) {
    if (it == warm) {
      t0 = now();
    }
    long posted = 0;
    for (long i = 0; i < x->chunks; i++) {
      step(x, base, i, &posted);
    }
    base += x->chunks;
  }
  double t = (now() - t0) / iters;
  if (x->me) {
    _exit(0);
  }
  waitpid(child, NULL, 0);
  printf("%s %zu bytes chunk %zu depth %ld ahead %ld: %.1f us, %.2f GB/s\n", name, bytes, chunk,
         depth, ahead, t * 1e6, bytes / t / 1e9);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 5 && strcmp(argv[1], "ring") == 0) {
    return ring(atol(argv[2]), atol(argv[3]), atol(argv[4]));
  }
  if (argc == 7 && strcmp(argv[1], "oneshot") == 0) {
    return two_ranks("oneshot", oneshot_chunk, atol(argv[2]), atol(argv[3]), atol(argv[4]),
                     atol(argv[5]), atoi(argv[6]));
  }
  if (argc == 7 && strcmp(argv[1], "pair") == 0) {
    return two_ranks("pair", asym_chunk, atol(argv[2]), atol(argv[3]), atol(argv[4]),
                     atol(argv[5]), atoi(argv[6]));
  }
  fprintf(stderr,
          "usage: crosscore ring CHUNK ITERS SLOTS\n"
          "       crosscore oneshot BYTES CHUNK DEPTH AHEAD ITERS\n"
          "       crosscore pair BYTES CHUNK DEPTH AHEAD ITERS\n");
  return 2;
}
