// Planted: crashes in a static initializer, while the worker loads it (crashed, during loading).
#include <cstdlib>

#include "kernel_abi.h"

namespace {
struct Boom {
  Boom() { std::abort(); }
} boom;
}  // namespace

extern "C" int kiln_kernel(const kiln_tensor* in, int n_in, kiln_tensor* out, int n_out) { return 0; }
