// The worker process (the kiln-worker executable, tools/kiln_worker.cpp): the only place candidate code is
// loaded. It reads a request from its scratch directory (worker_protocol.h), allocates guarded buffers,
// gives up what the candidate must not have (root becomes nobody, no new processes), then dlopen()s the
// candidate and calls it: twice per verification trial on identical inputs with different output poisons,
// stack and heap fills; or in a timed loop over rotating buffers. Everything it learns goes to files; the
// parent decides what it means. One worker serves one request and exits; a crash costs only that worker.
#pragma once

#include <cstddef>
#include <string>

namespace kiln::harness {

// Device memory for requests that run on a GPU, supplied by the worker executable built with the CUDA
// backend (tools/kiln_gpu_worker.cpp) so that this library stays free of CUDA. Every call returns an empty
// string on success or what went wrong; a failure in `synchronize` after a kernel call is the candidate's
// (an illegal address, a trap).
struct WorkerDeviceOps {
  virtual ~WorkerDeviceOps() = default;
  virtual std::string init() = 0;  // before privileges are dropped: the driver opens its devices and threads
  virtual std::string allocate(size_t bytes, void** device_ptr) = 0;
  virtual std::string upload(void* device_dst, const void* host_src, size_t bytes) = 0;
  virtual std::string download(void* host_dst, const void* device_src, size_t bytes) = 0;
  virtual std::string synchronize() = 0;
};

// `device` is null in kiln-worker; a request for the cuda device is then refused as a bad request.
int worker_main(int argc, char** argv, WorkerDeviceOps* device = nullptr);

// Whether this build runs under AddressSanitizer. Then the worker cannot take an address-space limit (the
// shadow memory needs terabytes of it); a watchdog thread, started before candidate code can run, ends the
// worker when its resident memory passes the limit instead.
constexpr bool built_with_sanitizers() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

}  // namespace kiln::harness
