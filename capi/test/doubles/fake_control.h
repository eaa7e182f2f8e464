/*
 * fake_control.h: the test-only controls of the runtime doubles in this
 * directory, libcudart.so.12 (fake_cudart.c) and libascendcl.so
 * (fake_ascendcl.c). Each double exports the runtime's own prototypes for
 * what gohccl calls, plus device allocation and synchronous copies for the
 * tests, and these controls (prefix fakecuda_ or fakeacl_).
 *
 * Environment, read when the double loads:
 *   FAKE_RUNTIME_DELAY_US   each asynchronous copy takes this long on its
 *                           stream, on top of the copying
 *   FAKE_RUNTIME_FAIL       "call:nth:code", e.g.
 *                           "aclrtMemcpyAsync:5:507899": the nth call of
 *                           that entry point returns code
 *   FAKE_ACL_STRICT_ALIGN   1: refuse asynchronous copies whose addresses are
 *                           not 64-byte aligned, as CANN 8.0 documents
 *   FAKE_DEVICE_HEAP_MB     size of the device memory (default 1024)
 */
#ifndef GOHCCL_FAKE_CONTROL_H
#define GOHCCL_FAKE_CONTROL_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fake_counters {
  uint64_t bytes_down;  /* asynchronous copies, device to host */
  uint64_t bytes_up;    /* asynchronous copies, host to device */
  uint64_t copies;      /* asynchronous copies queued */
  uint64_t syncs;       /* stream synchronizations */
  uint64_t pending;     /* copies queued and not yet run, now */
  int64_t live_pinned;  /* pinned host allocations not freed */
  int64_t live_device;  /* device allocations not freed */
  uint64_t violations;  /* calls refused by the checks */
  uint64_t unaligned;   /* asynchronous copies with an address not 64-byte aligned */
} fake_counters;

void fakecuda_counters(fake_counters* out);
void fakecuda_reset(void); /* zeroes bytes, copies, syncs, violations, unaligned */
void fakecuda_inject(const char* call, long nth, int code);
void fakecuda_set_delay_us(long us);
const char* fakecuda_last_violation(void);

void fakeacl_counters(fake_counters* out);
void fakeacl_reset(void);
void fakeacl_inject(const char* call, long nth, int code);
void fakeacl_set_delay_us(long us);
const char* fakeacl_last_violation(void);

#ifdef __cplusplus
}
#endif

#endif
