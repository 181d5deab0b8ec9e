// NVRTC: CUDA C++ source -> a cubin for the device's architecture, with the compiler log kept as evidence.
// Generated kernels (the CUDA dialect of the emitter) and hand-written kiln kernels both compile here.
#pragma once

#include <string>
#include <vector>

#include "util/result.h"

namespace kiln::cuda {

struct NvrtcOptions {
  std::string arch = "sm_90";  // "sm_90a" enables wgmma/setmaxnreg (Hopper-only instructions)
  std::vector<std::string> extra;  // e.g. "-DTILE=128"
  bool line_info = true;
};

struct NvrtcOutput {
  std::vector<char> cubin;
  std::string log;  // warnings too
};

// A rejected source is an invalid_argument error whose message carries the compiler log.
Result<NvrtcOutput> nvrtc_compile(const std::string& source, const std::string& name, const NvrtcOptions& options);

// "13.0" — recorded with every figure and in compile-cache keys.
std::string nvrtc_version();

}  // namespace kiln::cuda
