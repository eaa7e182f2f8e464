/*
 * capi_vs_mpi: gohccl's C ABI against MPI in one mpirun job, no torch in
 * the way. Every process times MPI's collective and gohccl's on the same
 * memory, interleaved in rounds (MPI, gohccl, MPI, gohccl, ...), so both
 * see the same machine load. Rows follow nccl-tests: size, count, type,
 * redop, time, algbw, busbw, for each library, and gohccl's speedup.
 * Where gohccl's tuner measures its choices (GOHCCL_TUNE=auto on one host
 * with a core per rank), a size's first ops are its trial; they run
 * untimed before the warm-up, and a comment line says how many and how
 * long they took.
 *
 *   mpicc -O2 -o build/capi_vs_mpi benchmarks/capi_vs_mpi.c \
 *       -Icapi/include -Lpython/gohccl/lib -lgohccl -Wl,-rpath,$PWD/python/gohccl/lib
 *   mpirun -np 2 build/capi_vs_mpi [-o allreduce|allgather|reduce_scatter|broadcast]
 *          [-b 4096] [-e 67108864] [-f 4] [-n 50] [-r 5]
 *
 * (benchmarks/mpi.sh builds and runs it.) gohccl bootstraps through a
 * directory store: rank 0 makes a temporary directory and broadcasts its
 * path with MPI; keys are files written atomically with rename.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gohccl.h"

/* ---- a key-value store in a directory, for gohccl's bootstrap ---- */

static void key_path(const char* dir, const char* key, char* out, size_t len) {
  /* Keys contain '/', which a file name cannot: map it to '#'. */
  size_t n = (size_t)snprintf(out, len, "%s/", dir);
  for (const char* k = key; *k && n + 1 < len; k++) out[n++] = *k == '/' ? '#' : *k;
  out[n] = 0;
}

static int store_set(void* ctx, const char* key, const uint8_t* value, size_t len,
                     char* err, size_t err_len) {
  char path[4096], tmp[4200];
  key_path(ctx, key, path, sizeof path);
  snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, getpid());
  FILE* f = fopen(tmp, "wb");
  if (!f || fwrite(value, 1, len, f) != len || fclose(f) != 0 || rename(tmp, path) != 0) {
    snprintf(err, err_len, "store set %s: %s", key, strerror(errno));
    return 1;
  }
  return 0;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int store_get(void* ctx, const char* key, int64_t timeout_ms, uint8_t** value,
                     size_t* len, char* err, size_t err_len) {
  char path[4096];
  key_path(ctx, key, path, sizeof path);
  double end = now_s() + (double)timeout_ms / 1e3;
  for (;;) {
    FILE* f = fopen(path, "rb");
    if (f) {
      fseek(f, 0, SEEK_END);
      long n = ftell(f);
      fseek(f, 0, SEEK_SET);
      *value = malloc(n > 0 ? (size_t)n : 1);
      *len = fread(*value, 1, (size_t)n, f);
      fclose(f);
      return 0;
    }
    if (now_s() > end) {
      snprintf(err, err_len, "store get %s: timed out", key);
      return 1;
    }
    usleep(1000);
  }
}

static int store_add(void* ctx, const char* key, int64_t delta, int64_t* out, char* err,
                     size_t err_len) {
  char path[4096];
  key_path(ctx, key, path, sizeof path);
  int fd = open(path, O_RDWR | O_CREAT, 0600);
  if (fd < 0 || flock(fd, LOCK_EX) != 0) {
    snprintf(err, err_len, "store add %s: %s", key, strerror(errno));
    if (fd >= 0) close(fd);
    return 1;
  }
  char buf[32] = {0};
  ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  int64_t v = (n > 0 ? strtoll(buf, NULL, 10) : 0) + delta;
  int m = snprintf(buf, sizeof buf, "%lld", (long long)v);
  if (ftruncate(fd, 0) != 0 || pwrite(fd, buf, (size_t)m, 0) != m) {
    snprintf(err, err_len, "store add %s: %s", key, strerror(errno));
    close(fd);
    return 1;
  }
  close(fd);
  *out = v;
  return 0;
}

static void remove_dir(const char* dir) {
  DIR* d = opendir(dir);
  if (!d) return;
  struct dirent* e;
  char path[4096];
  while ((e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.') continue;
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    unlink(path);
  }
  closedir(d);
  rmdir(dir);
}

static const gohccl_store_ops dir_store = {store_set, store_get, store_add};

/* ---- the benchmark ---- */

enum coll { ALLREDUCE, ALLGATHER, REDUCE_SCATTER, BROADCAST };
static const char* coll_names[] = {"allreduce", "allgather", "reduce_scatter", "broadcast"};

static int rank, size;
static gohccl_comm comm;
static char err[1024];

static void die(const char* what) {
  fprintf(stderr, "rank %d: %s: %s\n", rank, what, err);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/* run_mpi and run_gohccl perform one collective of `count` float32
 * elements per rank (allreduce, broadcast: the whole buffer; allgather:
 * count in, size*count out; reduce_scatter: size*count in, count out). */
static void run_mpi(enum coll c, float* in, float* out, size_t count) {
  switch (c) {
  case ALLREDUCE: MPI_Allreduce(MPI_IN_PLACE, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
  case ALLGATHER: MPI_Allgather(in, (int)count, MPI_FLOAT, out, (int)count, MPI_FLOAT, MPI_COMM_WORLD); break;
  case REDUCE_SCATTER: MPI_Reduce_scatter_block(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
  case BROADCAST: MPI_Bcast(out, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD); break;
  }
}

static void run_gohccl(enum coll c, float* in, float* out, size_t count) {
  gohccl_status s = GOHCCL_OK;
  switch (c) {
  case ALLREDUCE: s = gohccl_allreduce(comm, out, count, GOHCCL_FLOAT32, GOHCCL_SUM, 0, err, sizeof err); break;
  case ALLGATHER: s = gohccl_allgather(comm, in, out, count, GOHCCL_FLOAT32, 0, err, sizeof err); break;
  case REDUCE_SCATTER: s = gohccl_reduce_scatter(comm, in, out, count, GOHCCL_FLOAT32, GOHCCL_SUM, 0, err, sizeof err); break;
  case BROADCAST: s = gohccl_broadcast(comm, out, count, GOHCCL_FLOAT32, 0, 0, err, sizeof err); break;
  }
  if (s != GOHCCL_OK) die(coll_names[c]);
}

/* check runs one collective of each library on known inputs and compares
 * the results element by element; it returns the number of wrong ones. */
static long check(enum coll c, float* in, float* out, size_t count) {
  size_t nin = c == REDUCE_SCATTER ? count * size : count;
  size_t nout = c == ALLGATHER ? count * size : count;
  long wrong = 0;
  for (int lib = 0; lib < 2; lib++) {
    for (size_t i = 0; i < nin; i++) in[i] = (float)((rank + 1) * (int)(i % 97));
    for (size_t i = 0; i < nout; i++) out[i] = c == REDUCE_SCATTER ? -1.0f : (float)((rank + 1) * (int)(i % 97));
    if (lib == 0) run_mpi(c, in, out, count); else run_gohccl(c, in, out, count);
    for (size_t i = 0; i < nout; i++) {
      float want;
      switch (c) {
      case ALLREDUCE: want = (float)(size * (size + 1) / 2 * (int)(i % 97)); break;
      case ALLGATHER: want = (float)((int)(i / count) + 1) * (float)((int)((i % count) % 97)); break;
      case REDUCE_SCATTER: want = (float)(size * (size + 1) / 2 * (int)((rank * count + i) % 97)); break;
      default: want = (float)(i % 97); break;
      }
      if (out[i] != want) wrong++;
    }
  }
  return wrong;
}

/* trial_left is how many more ops of this size the communicator's tuner
 * runs as its trial (GOHCCL_TUNE: its first ops of a size class run each
 * candidate row in turn, slower ones too): the sum of "Left" over the
 * Trials of gohccl_comm_info_json. While a trial is under way only one
 * class is being measured here, the size this program is at. */
static int trial_left(void) {
  char* info = NULL;
  if (gohccl_comm_info_json(comm, &info, err, sizeof err) != GOHCCL_OK) die("gohccl_comm_info_json");
  int left = 0;
  for (const char* p = info; (p = strstr(p, "\"Left\":")) != NULL; p += 7) left += atoi(p + 7);
  gohccl_free(info);
  return left;
}

/* settle runs, untimed, the ops the tuner's trial of this size has left,
 * as python -m gohccl.bench does: the trial is what the first ops of a
 * size class cost once per communicator, not what a stream of them costs.
 * Every rank's trial ends after the same op, so the ranks run the same
 * calls. It returns the trial's ops and, through *secs, their time. */
static int settle(enum coll c, float* in, float* out, size_t count, double* secs) {
  double t0 = now_s();
  int ops = 0;
  for (int left = trial_left(); left > 0; left = trial_left()) {
    for (int i = 0; i < left; i++) run_gohccl(c, in, out, count);
    ops += left;
  }
  *secs = now_s() - t0;
  return ops;
}

static double time_loop(int lib, enum coll c, float* in, float* out, size_t count, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  double t0 = now_s();
  for (int i = 0; i < iters; i++) {
    if (lib == 0) run_mpi(c, in, out, count); else run_gohccl(c, in, out, count);
  }
  double t = (now_s() - t0) / iters, tmax;
  MPI_Allreduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return tmax;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  size_t minb = 4096, maxb = 64u << 20;
  int factor = 4, iters = 50, rounds = 5;
  enum coll c = ALLREDUCE;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "-b")) minb = strtoull(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "-e")) maxb = strtoull(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "-f")) factor = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-n")) iters = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-r")) rounds = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "-o")) {
      for (int k = 0; k < 4; k++) if (!strcmp(argv[i + 1], coll_names[k])) c = (enum coll)k;
    }
  }
  if (factor < 2 || iters < 1 || rounds < 1 || rounds > 64 || minb < 4 || maxb < minb) {
    if (rank == 0) fprintf(stderr, "bad arguments\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }

  char dir[256] = "";
  if (rank == 0) {
    strcpy(dir, "/tmp/gohccl-capi-bench-XXXXXX");
    if (!mkdtemp(dir)) { snprintf(err, sizeof err, "%s", strerror(errno)); die("mkdtemp"); }
  }
  MPI_Bcast(dir, sizeof dir, MPI_CHAR, 0, MPI_COMM_WORLD);
  if (gohccl_comm_create(&dir_store, dir, rank, size, 60000, &comm, err, sizeof err) != GOHCCL_OK)
    die("gohccl_comm_create");
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    char desc[512];
    gohccl_comm_describe(comm, desc, sizeof desc);
    printf("# gohccl %s: %s\n# %d ranks, %s float32 sum, %d iterations x %d rounds, interleaved with MPI\n",
           gohccl_version(), desc, size, coll_names[c], iters, rounds);
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int lib_len = 0;
    MPI_Get_library_version(lib, &lib_len);
    lib[strcspn(lib, "\n")] = 0; /* the first line names the library and its version */
    printf("# MPI: %s\n", lib);
    printf("# time: median over rounds of the mean per op (slowest rank)\n");
    printf("%12s %10s %12s %9s %9s %12s %9s %9s %8s %7s\n", "size(B)", "count", "mpi us", "algbw",
           "busbw", "gohccl us", "algbw", "busbw", "speedup", "#wrong");
  }
  float* in = aligned_alloc(4096, ((maxb * (size_t)size + 4095) / 4096) * 4096);
  float* out = aligned_alloc(4096, ((maxb * (size_t)size + 4095) / 4096) * 4096);
  if (!in || !out) { snprintf(err, sizeof err, "out of memory"); die("alloc"); }
  memset(in, 0, maxb * size);
  memset(out, 0, maxb * size);

  for (size_t bytes = minb; bytes <= maxb; bytes *= (size_t)factor) {
    size_t count = bytes / 4;
    long wrong = check(c, in, out, count), total_wrong;
    MPI_Allreduce(&wrong, &total_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    memset(in, 0, bytes * size); /* zeros: repeated sums stay finite */
    memset(out, 0, bytes * size);
    double trial_s = 0;
    int trial_ops = settle(c, in, out, count, &trial_s);
    if (rank == 0 && trial_ops > 0)
      printf("# %zu bytes: the tuner's trial ran %d ops first, untimed, in %.1f ms\n", bytes, trial_ops,
             trial_s * 1e3);
    int n = bytes >= (16u << 20) ? (iters + 4) / 5 : iters;
    for (int lib = 0; lib < 2; lib++) time_loop(lib, c, in, out, count, n / 5 + 1); /* warm-up */
    double t[2][64];
    for (int r = 0; r < rounds; r++)
      for (int lib = 0; lib < 2; lib++) t[lib][r] = time_loop(lib, c, in, out, count, n);
    if (rank == 0) {
      double med[2], algbw[2], busbw[2];
      /* nccl-tests' bus factors: the bytes each rank moves relative to the
       * message, so that busbw compares with the link's speed. */
      double factor_bus = c == ALLREDUCE ? 2.0 * (size - 1) / size
                        : c == BROADCAST ? 1.0 : (double)(size - 1) / size;
      double msg = c == ALLREDUCE || c == BROADCAST ? (double)bytes : (double)bytes * size;
      for (int lib = 0; lib < 2; lib++) {
        qsort(t[lib], (size_t)rounds, sizeof(double), cmp_double);
        med[lib] = t[lib][rounds / 2];
        algbw[lib] = msg / med[lib] / 1e9;
        busbw[lib] = algbw[lib] * factor_bus;
      }
      printf("%12zu %10zu %12.2f %9.2f %9.2f %12.2f %9.2f %9.2f %7.2fx %7ld\n", bytes, count,
             med[0] * 1e6, algbw[0], busbw[0], med[1] * 1e6, algbw[1], busbw[1], med[0] / med[1],
             total_wrong);
      fflush(stdout);
    }
  }
  gohccl_comm_destroy(comm);
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) remove_dir(dir);
  free(in);
  free(out);
  MPI_Finalize();
  return 0;
}
