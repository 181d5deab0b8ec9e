// Planted: exits with the worker's own "bad request" code mid-call, as if the harness had failed (crashed:
// a candidate cannot pass its failure off as a harness fault).
#include <cstdlib>

#include "kernel_abi.h"

extern "C" int kiln_kernel(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) { std::exit(2); }
