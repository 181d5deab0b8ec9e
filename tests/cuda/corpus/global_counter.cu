// GPU corpus (nondeterministic): adds a device-side call counter to one element.
#include "kernel_abi.h"
__device__ int calls;
__global__ void k(const float* a, const float* b, float* y, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    y[i] = a[i] + b[i] + (i == 0 ? 0.5f * calls : 0.0f);
  if (blockIdx.x == 0 && threadIdx.x == 0) atomicAdd(&calls, 1);
}
extern "C" int kiln_kernel(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) {
  long long n = 1;
  for (int d = 0; d < out[0].rank; ++d) n *= out[0].shape[d];
  const float* a = (const float*)in[0].data;
  const float* b = (const float*)in[1].data;
  float* y = (float*)out[0].data;
  k<<<64, 256>>>(a, b, y, n);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
