// Planted: compiles, but defines no kiln_kernel (crashed: the worker cannot load it).
#include "kernel_abi.h"

extern "C" int kiln_kernal(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) { return 0; }
