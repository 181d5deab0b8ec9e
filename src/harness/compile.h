// Compiling a candidate: its source and the kernel ABI header are written into a scratch directory and the
// system compiler builds a shared object there, inside a sandbox with its own time and memory limits. A
// compiler rejection or hang is the candidate's outcome; a compiler that cannot be started is a harness fault.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "harness/outcome.h"

namespace kiln::harness {

struct CompileOptions {
  std::string compiler = "g++";
  // -z defs turns an unresolved symbol into a compile error instead of a load failure in the worker.
  std::vector<std::string> flags = {"-O2", "-std=c++17", "-shared", "-fPIC", "-Wl,-z,defs"};
  double wall_seconds = 30;
  int64_t memory_bytes = 2ll << 30;
  // A content-addressed cache of built shared objects (key: source, ABI header, compiler version, flags),
  // shared safely by concurrent processes; empty: none. Failed compiles are not cached.
  std::string cache_dir;
};

// Options for a candidate that runs on a GPU (WorkerDevice::cuda): the same source file and kiln_kernel entry
// point, compiled by nvcc as CUDA C++ (kernels and the host code that launches them, on the default stream),
// with the CUDA runtime linked statically so the shared object needs nothing at load time.
CompileOptions cuda_compile_options(const std::string& arch = "sm_90", const std::string& nvcc = "/usr/local/cuda/bin/nvcc");

struct CompiledCandidate {
  CandidateOutcome outcome;  // compiled, compile_error, compile_timeout or harness_fault
  std::string library_path;  // the shared object, when compiled
  std::string compiler_version;
};

// Writes `source` as candidate.cpp and kernel_abi.h into `scratch_dir` (created) and builds candidate.so
// there, or returns the cached one (library_path then points into the cache).
CompiledCandidate compile_candidate(const std::string& source, const std::string& scratch_dir,
                                    const CompileOptions& options = {});

// First line of `compiler --version` (cached per compiler); "unknown" when it cannot be run.
std::string compiler_version(const std::string& compiler);

// The text of kernel_abi.h as candidates see it.
std::string_view kernel_abi_header_text();

}  // namespace kiln::harness
