// CHECK_CUDA for the standalone probes in bench/gpu (each built with one nvcc command): a failing runtime call
// prints where and why, and the probe exits.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(x)                                                               \
  do {                                                                              \
    cudaError_t e = (x);                                                            \
    if (e != cudaSuccess) {                                                         \
      std::printf("%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                 \
    }                                                                               \
  } while (0)
