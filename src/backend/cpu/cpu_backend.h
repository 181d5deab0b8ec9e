// The CPU backend: host memory, generated C++ compiled by the system compiler into a shared object (through
// the harness's sandboxed compile step and its content-addressed cache: key = source, flags, compiler
// version) and dlopen'ed into this process; row ranges run on a small thread pool the backend owns. Library
// ops: GEMMs through OpenBLAS sgemm (bf16/f16/fp8 operands converted to f32, scales applied), attention as a
// blocked kernel with online softmax, gather by reference.
//
// Generated kernels loaded here are kiln's own; code from elsewhere goes through the harness worker.
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"

namespace kiln::backend {

struct CpuBackendOptions {
  std::string compiler = "g++";
  // -mprefer-vector-width=512: GCC's -march=native otherwise vectorizes with 256-bit registers on AVX-512 parts.
  std::vector<std::string> flags = {"-O3",           "-march=native",   "-mprefer-vector-width=512",
                                    "-std=c++17",    "-fopenmp-simd",   "-fno-math-errno",
                                    "-shared",       "-fPIC",           "-Wl,-z,defs"};
  std::string cache_dir;     // empty: <temp>/kiln-kernel-cache
  std::string scratch_root;  // empty: the system temp dir
  int threads = 0;           // pool workers; 0: the logical cores
  double compile_seconds = 120;
};

std::unique_ptr<Backend> make_cpu_backend(const CpuBackendOptions& options = {});

// f32 sgemm rate of this machine (measured once per process on 512^3, best of 3).
double measured_sgemm_flops();

}  // namespace kiln::backend
