/* The C ABI between kiln and a kernel candidate. A candidate is one C++ (or C) source file that includes this
 * header and defines kiln_kernel; the harness compiles it into a shared object and calls it only inside a
 * worker process (harness/worker.h). This file is handed to every candidate compile as-is, so it must stay
 * plain C: no kiln headers, no namespaces. The build embeds its text in the harness (cmake/kernel_abi.cpp.in). */
#ifndef KILN_KERNEL_ABI_H
#define KILN_KERNEL_ABI_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Element type codes: the values of kiln::DType. Storage is little-endian, row-major, dense. */
enum {
  KILN_F32 = 0,
  KILN_F16 = 1,
  KILN_BF16 = 2,
  KILN_F8E4M3 = 3,
  KILN_F8E5M2 = 4,
  KILN_I32 = 5,
  KILN_I64 = 6,
  KILN_BOOL = 7
};

/* One dense tensor. `data` is 64-byte aligned; `shape` has `rank` extents. Inputs must not be written;
 * outputs must be written in full and nowhere beyond their extent. */
typedef struct kiln_tensor {
  void* data;
  const int64_t* shape;
  int rank;
  int dtype;
} kiln_tensor;

/* The entry point every candidate defines. Inputs and outputs come in the order of the kernel task (its
 * graph inputs, then its graph outputs). Returns 0 on success; any other value is a failure the harness
 * records. The kernel may be called many times in one process, on the same or different buffers. */
int kiln_kernel(const kiln_tensor* inputs, int n_inputs, kiln_tensor* outputs, int n_outputs);

#ifdef __cplusplus
}
#endif

#endif /* KILN_KERNEL_ABI_H */
