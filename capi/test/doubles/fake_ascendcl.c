/*
 * fake_ascendcl.c: a test double of the Ascend runtime (AscendCL), built as
 * libascendcl.so (fake_runtime.h describes the engine). It exports, with
 * the prototypes and codes of acl/acl.h, acl/acl_rt.h and the runtime's
 * error header, the calls gohccl makes and the few a test needs to own
 * device memory and streams. Written from the published prototypes; no
 * Huawei code. As the real runtime, it refuses every call before aclInit
 * and every device call on a thread with no device set.
 */
#include "fake_runtime.h"

typedef int aclError;
typedef void* aclrtStream;

enum {
  ACL_SUCCESS = 0,
  ACL_ERROR_INVALID_PARAM = 100000,
  ACL_ERROR_UNINITIALIZE = 100001,
  ACL_ERROR_REPEAT_INITIALIZE = 100002,
  ACL_ERROR_RT_PARAM_INVALID = 107000,
  ACL_ERROR_RT_INVALID_DEVICEID = 107001,
  ACL_ERROR_RT_CONTEXT_NULL = 107002,
  ACL_ERROR_RT_MEMORY_ALLOCATION = 207001
};

static const struct fake_codes acl_codes = {
    .invalid_value = ACL_ERROR_RT_PARAM_INVALID,
    .invalid_device = ACL_ERROR_RT_INVALID_DEVICEID,
    .bad_stream = ACL_ERROR_RT_PARAM_INVALID,
    .bad_address = ACL_ERROR_RT_PARAM_INVALID,
    .no_device = ACL_ERROR_RT_CONTEXT_NULL,
    .uninitialized = ACL_ERROR_UNINITIALIZE,
    .out_of_memory = ACL_ERROR_RT_MEMORY_ALLOCATION,
};

__attribute__((constructor)) static void fake_acl_load(void) { fake_setup(&acl_codes, 1); }

aclError aclInit(const char* config_path) {
  (void)config_path;
  pthread_mutex_lock(&fake.mu);
  int rc = fake.initialized ? ACL_ERROR_REPEAT_INITIALIZE : ACL_SUCCESS;
  fake.initialized = 1;
  pthread_mutex_unlock(&fake.mu);
  return rc;
}
aclError aclFinalize(void) {
  pthread_mutex_lock(&fake.mu);
  fake.initialized = 0;
  pthread_mutex_unlock(&fake.mu);
  return ACL_SUCCESS;
}
const char* aclGetRecentErrMsg(void) { return fake_thread_msg[0] != '\0' ? fake_thread_msg : NULL; }

aclError aclrtSetDevice(int32_t dev) { return fake_set_device("aclrtSetDevice", dev); }
aclError aclrtResetDevice(int32_t dev) {
  (void)dev;
  return ACL_SUCCESS;
}
aclError aclrtGetDevice(int32_t* dev) { return fake_get_device("aclrtGetDevice", dev); }
aclError aclrtMalloc(void** p, size_t n, int policy) {
  (void)policy;
  return fake_malloc("aclrtMalloc", p, n);
}
aclError aclrtFree(void* p) { return fake_free("aclrtFree", p); }
aclError aclrtMallocHost(void** p, size_t n) { return fake_malloc_host("aclrtMallocHost", p, n); }
aclError aclrtFreeHost(void* p) { return fake_free_host("aclrtFreeHost", p); }
aclError aclrtCreateStream(aclrtStream* s) { return fake_stream_create("aclrtCreateStream", s); }
aclError aclrtDestroyStream(aclrtStream s) { return fake_stream_destroy("aclrtDestroyStream", s); }
aclError aclrtSynchronizeStream(aclrtStream s) { return fake_synchronize("aclrtSynchronizeStream", s); }
aclError aclrtMemcpy(void* dst, size_t dest_max, const void* src, size_t count, int kind) {
  return fake_memcpy("aclrtMemcpy", dst, dest_max, src, count, kind);
}
aclError aclrtMemcpyAsync(void* dst, size_t dest_max, const void* src, size_t count, int kind, aclrtStream s) {
  return fake_memcpy_async("aclrtMemcpyAsync", dst, dest_max, src, count, kind, s);
}

void fakeacl_counters(fake_counters* out) { fake_read_counters(out); }
void fakeacl_reset(void) { fake_reset(); }
void fakeacl_inject(const char* call, long nth, int code) { fake_inject(call, nth, code); }
void fakeacl_set_delay_us(long us) { fake_set_delay(us); }
const char* fakeacl_last_violation(void) { return fake_last_violation(); }
