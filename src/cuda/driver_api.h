// The driver API, loaded at run time: kiln dlopens libcuda.so.1 instead of linking it, so that the same kiln
// binary starts on a machine without an NVIDIA driver (CI) and reports "no CUDA driver" only when the CUDA
// backend is asked for. cuBLASLt, NVRTC and cuDNN load the driver the same way themselves.
//
// Each entry has the type of the cuda.h declaration it stands for; cuda.h's version macros (cuMemAlloc ->
// cuMemAlloc_v2) apply to the member names and the looked-up symbols alike.
#pragma once

#include <cuda.h>
#include <cudaProfiler.h>

#include "util/result.h"

namespace kiln::cuda {

#define KILN_CUDA_DRIVER_FUNCTIONS(X)                                                                          \
  X(cuGetErrorName) X(cuGetErrorString) X(cuInit) X(cuDriverGetVersion) X(cuDeviceGetCount) X(cuDeviceGet)    \
  X(cuDeviceGetName) X(cuDeviceTotalMem) X(cuDeviceGetAttribute) X(cuDevicePrimaryCtxRetain)                  \
  X(cuDevicePrimaryCtxRelease) X(cuCtxSetCurrent) X(cuCtxSynchronize) X(cuMemAlloc) X(cuMemFree)               \
  X(cuMemcpyHtoD) X(cuMemcpyDtoH) X(cuMemcpyDtoD) X(cuMemcpyDtoDAsync) X(cuMemsetD8) X(cuMemsetD32) X(cuMemsetD32Async) \
  X(cuStreamCreate) X(cuStreamDestroy) X(cuStreamSynchronize) X(cuEventCreate) X(cuEventDestroy)               \
  X(cuEventRecord) X(cuStreamWaitEvent) X(cuEventSynchronize) X(cuEventElapsedTime) X(cuModuleLoadData) X(cuModuleUnload)          \
  X(cuModuleGetFunction) X(cuFuncSetAttribute) X(cuFuncGetAttribute) X(cuLaunchKernel)                        \
  X(cuStreamBeginCapture) X(cuStreamEndCapture) X(cuGraphInstantiate) X(cuGraphDestroy) X(cuGraphExecDestroy) \
  X(cuGraphLaunch) X(cuGraphGetNodes) X(cuProfilerStart) X(cuProfilerStop) X(cuCtxGetDevice)                  \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor)

struct DriverApi {
#define KILN_CUDA_DECLARE(name) decltype(&::name) name = nullptr;
  KILN_CUDA_DRIVER_FUNCTIONS(KILN_CUDA_DECLARE)
#undef KILN_CUDA_DECLARE
};

// The loaded table, or a device_error saying why not (no libcuda.so.1, a missing symbol: driver too old).
// Loaded once per process; later calls return the same table or the same error.
Result<const DriverApi*> driver_api();

}  // namespace kiln::cuda
