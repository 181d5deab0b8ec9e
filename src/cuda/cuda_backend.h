// The CUDA backend (backend/backend.h) on the pieces in this folder: device memory and launches through the
// driver API, generated kernels (the emitter's CUDA dialect) compiled by NVRTC, GEMMs through cuBLASLt and
// attention through cuDNN. `register_cuda_backend` makes `make_backend("cuda")` find it; binaries linked with
// kiln_cuda call it at start.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace kiln::cuda {

// Opens device 0 and measures its copy bandwidth and bf16 GEMM rate (a few milliseconds).
Result<std::unique_ptr<backend::Backend>> make_cuda_backend();
void register_cuda_backend();

}  // namespace kiln::cuda
