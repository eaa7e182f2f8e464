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

static int oneshot(size_t bytes, size_t chunk, long depth, long ahead, int iters) {
  if (ahead >= depth || chunk % 4 != 0) {
    fprintf(stderr, "oneshot: need AHEAD < DEPTH and CHUNK a multiple of 4\n");
    return 2;
  }
  char* m = shared(4096 + 2 * (size_t)depth * chunk);
  counter *ready = (counter*)m, *freed = ready + 2;
  char* data = m + 4096;
  pid_t child = fork();
  int me = child == 0;
  float* buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
  for (size_t i = 0; i < bytes / 4; i++) {
    buf[i] = 1;
  }
  long chunks = (long)((bytes + chunk - 1) / chunk), base = 0;
#define SLOT(r, k) (data + ((r) * depth + (k) % depth) * chunk)
  double t0 = 0;
  const int warm = 5;
  for (int it = 0; it < iters + warm; it++) {
    if (it == warm) {
      t0 = now();
    }
    long posted = 0;
    for (long i = 0; i < chunks; i++) {
      for (; posted < chunks && posted <= i + ahead; posted++) {
        long k = base + posted;
        if (k >= depth) {
          await(&freed[1 - me], k + 1 - depth);
        }
        size_t off = posted * chunk, n = off + chunk > bytes ? bytes - off : chunk;
        memcpy(SLOT(me, k), (char*)buf + off, n);
        publish(&ready[me], k + 1);
      }
      long k = base + i;
      await(&ready[1 - me], k + 1);
      size_t off = i * chunk, n = off + chunk > bytes ? bytes - off : chunk;
      float* d = (float*)((char*)buf + off);
      const float* p = (const float*)SLOT(1 - me, k);
      for (size_t j = 0; j < n / 4; j++) {
        d[j] += p[j];
      }
      publish(&freed[me], k + 1);
    }
    base += chunks;
  }
  double t = (now() - t0) / iters;
  if (me) {
    _exit(0);
  }
  waitpid(child, NULL, 0);
  printf("oneshot %zu bytes chunk %zu depth %ld ahead %ld: %.1f us, %.2f GB/s\n", bytes,
         chunk, depth, ahead, t * 1e6, bytes / t / 1e9);
  return 0;
}

static int pair(size_t bytes, size_t chunk, long depth, long ahead, int iters) {
  if (ahead >= depth || chunk % 4 != 0) {
    fprintf(stderr, "pair: need AHEAD < DEPTH and CHUNK a multiple of 4\n");
    return 2;
  }
  char* m = shared(4096 + 2 * (size_t)depth * chunk);
  counter *ready = (counter*)m, *freed = ready + 2;
  char* data = m + 4096;
  pid_t child = fork();
  int me = child == 0;
  float* buf = aligned_alloc(64, (bytes + 63) / 64 * 64);
  for (size_t i = 0; i < bytes / 4; i++) {
    buf[i] = 1;
  }
  long chunks = (long)((bytes + chunk - 1) / chunk), base = 0;
  double t0 = 0;
  const int warm = 5;
  for (int it = 0; it < iters + warm; it++) {
    if (it == warm) {
      t0 = now();
    }
    long posted = 0;
    for (long i = 0; i < chunks; i++) {
      long k = base + i;
      size_t off = i * chunk, n = off + chunk > bytes ? bytes - off : chunk;
      if (me == 0) {
        for (; posted < chunks && posted <= i + ahead; posted++) {
          long kp = base + posted;
          size_t o = posted * chunk, np = o + chunk > bytes ? bytes - o : chunk;
          if (kp >= depth) {
            await(&freed[1], kp + 1 - depth);
          }
          memcpy(SLOT(0, kp), (char*)buf + o, np);
          publish(&ready[0], kp + 1);
        }
        await(&ready[1], k + 1);
        memcpy((char*)buf + off, SLOT(1, k), n);
        publish(&freed[0], k + 1);
        continue;
      }
      await(&ready[0], k + 1);
      if (k >= depth) {
        await(&freed[0], k + 1 - depth);
      }
      float* d = (float*)((char*)buf + off);
      const float* p = (const float*)SLOT(0, k);
      float* o = (float*)SLOT(1, k);
      for (size_t j = 0; j < n / 4; j++) {
        float sum = p[j] + d[j];
        d[j] = sum;
        o[j] = sum;
      }
      publish(&freed[1], k + 1);
      publish(&ready[1], k + 1);
    }
    base += chunks;
  }
  double t = (now() - t0) / iters;
  if (me) {
    _exit(0);
  }
  waitpid(child, NULL, 0);
  printf("pair %zu bytes chunk %zu depth %ld ahead %ld: %.1f us, %.2f GB/s\n", bytes, chunk,
         depth, ahead, t * 1e6, bytes / t / 1e9);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 5 && strcmp(argv[1], "ring") == 0) {
    return ring(atol(argv[2]), atol(argv[3]), atol(argv[4]));
  }
  if (argc == 7 && strcmp(argv[1], "oneshot") == 0) {
    return oneshot(atol(argv[2]), atol(argv[3]), atol(argv[4]), atol(argv[5]),
                   atoi(argv[6]));
  }
  if (argc == 7 && strcmp(argv[1], "pair") == 0) {
    return pair(atol(argv[2]), atol(argv[3]), atol(argv[4]), atol(argv[5]), atoi(argv[6]));
  }
  fprintf(stderr,
          "usage: crosscore ring CHUNK ITERS SLOTS\n"
          "       crosscore oneshot BYTES CHUNK DEPTH AHEAD ITERS\n"
          "       crosscore pair BYTES CHUNK DEPTH AHEAD ITERS\n");
  return 2;
}
