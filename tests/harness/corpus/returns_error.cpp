// Planted: declines the work by returning nonzero (crashed, with the returned status as evidence).
#include "kernel_abi.h"

extern "C" int kiln_kernel(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) { return 7; }
