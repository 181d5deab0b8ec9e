// Planted: does not compile (compile-error, with the compiler's log as evidence).
#include "kernel_abi.h"

extern "C" int kiln_kernel(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) {
  float* y = out[0].data;  // void* does not convert to float* in C++
  y[0] = undeclared_value;
  return 0;
}
