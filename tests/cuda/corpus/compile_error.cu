// GPU corpus (compile-error): device code that does not compile.
#include "kernel_abi.h"
__global__ void k(float* y) { y[threadIdx.x] = undeclared_value; }
extern "C" int kiln_kernel(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) {
  k<<<1, 32>>>((float*)out[0].data);
  return 0;
}
