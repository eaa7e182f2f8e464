/*
 * fake_cudart.c: a test double of the CUDA runtime, built as
 * libcudart.so.12 (fake_runtime.h describes the engine). It exports, with
 * the runtime's prototypes and codes (cuda_runtime_api.h, driver_types.h),
 * the calls gohccl makes and the few a test needs to own device memory and
 * streams. Written from the published prototypes; no NVIDIA code.
 */
#include "fake_runtime.h"

typedef int cudaError_t;
typedef void* cudaStream_t;

enum {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalAddress = 700
};

static const struct fake_codes cuda_codes = {
    .invalid_value = cudaErrorInvalidValue,
    .invalid_device = cudaErrorInvalidDevice,
    .bad_stream = cudaErrorInvalidResourceHandle,
    .bad_address = cudaErrorIllegalAddress,
    .no_device = cudaErrorNoDevice,
    .uninitialized = cudaErrorInitializationError,
    .out_of_memory = cudaErrorMemoryAllocation,
};

__attribute__((constructor)) static void fake_cuda_load(void) { fake_setup(&cuda_codes, 0); }

cudaError_t cudaGetDeviceCount(int* n) {
  *n = FAKE_DEVICES;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) { return fake_set_device("cudaSetDevice", dev); }
cudaError_t cudaGetDevice(int* dev) { return fake_get_device("cudaGetDevice", dev); }
cudaError_t cudaMalloc(void** p, size_t n) { return fake_malloc("cudaMalloc", p, n); }
cudaError_t cudaFree(void* p) { return fake_free("cudaFree", p); }
cudaError_t cudaHostAlloc(void** p, size_t n, unsigned int flags) {
  (void)flags;
  return fake_malloc_host("cudaHostAlloc", p, n);
}
cudaError_t cudaFreeHost(void* p) { return fake_free_host("cudaFreeHost", p); }
cudaError_t cudaStreamCreate(cudaStream_t* s) { return fake_stream_create("cudaStreamCreate", s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) { return fake_stream_destroy("cudaStreamDestroy", s); }
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return fake_synchronize("cudaStreamSynchronize", s); }
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, int kind) {
  return fake_memcpy("cudaMemcpy", dst, n, src, n, kind);
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, int kind, cudaStream_t s) {
  return fake_memcpy_async("cudaMemcpyAsync", dst, n, src, n, kind, s);
}

const char* cudaGetErrorString(cudaError_t code) {
  switch (code) {
    case cudaSuccess:
      return "no error";
    case cudaErrorInvalidValue:
      return "invalid argument";
    case cudaErrorMemoryAllocation:
      return "out of memory";
    case cudaErrorNoDevice:
      return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice:
      return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle:
      return "invalid resource handle";
    case cudaErrorIllegalAddress:
      return "an illegal memory access was encountered";
  }
  return "unknown error (fake libcudart)";
}

void fakecuda_counters(fake_counters* out) { fake_read_counters(out); }
void fakecuda_reset(void) { fake_reset(); }
void fakecuda_inject(const char* call, long nth, int code) { fake_inject(call, nth, code); }
void fakecuda_set_delay_us(long us) { fake_set_delay(us); }
const char* fakecuda_last_violation(void) { return fake_last_violation(); }
