// kiln's own GEMV: y[n] = Σ_k w[n, k] · x[k] (+ bias[n]) for one row of x (M = 1) in bf16, f32 sums rounded once.
// A GEMV reads each weight once and does two FLOPs per weight, so it is a pass over the weights; cuBLASLt's
// algorithms for it are GEMM tilings, and on the H100 the best of them read FLUX's modulation weights (m = 1,
// k = 3072) well below a copy's rate (bench/gpu/probe_gemv.py). These kernels give each weight row to one warp
// (or two rows to a warp), read it in 16-byte loads with several in flight per lane, and reduce in the warp.
//
// They are candidates beside cuBLASLt's algorithms (gemm.h: GemmAlgorithm::gemv_variant), chosen only by timing
// and used only once BlasLt::agrees has compared them with cuBLASLt's first answer, as a neighbour is.
#pragma once

#include <cuda.h>

#include <memory>
#include <string>

#include "cuda/gemm.h"
#include "util/result.h"

namespace kiln::cuda {

class GemvKernels {
 public:
  // The launch shapes offered: threads per block x rows per warp.
  static constexpr int kVariants = 4;

  // Whether `desc` is a GEMV these kernels compute: m = 1, bf16 in and out, no epilogue or a bias.
  static bool fits(const GemmDesc& desc);
  static std::string describe(int variant);  // "kiln gemv: 256 threads, 1 row a warp"

  // Compiles the kernels for the current device (NVRTC); errors carry the compiler's log.
  static Result<GemvKernels> create();
  GemvKernels(GemvKernels&&) noexcept;
  GemvKernels& operator=(GemvKernels&&) noexcept;
  ~GemvKernels();

  // Enqueues variant `variant` on `stream`. Pointers that are not 16-byte aligned, or k not a multiple of 8,
  // take the kernels' 2-byte path (correct, slower). invalid_argument when !fits(desc) or the variant is out of
  // range.
  Status run(const GemmDesc& desc, int variant, const GemmArgs& args, CUstream stream) const;

 private:
  struct State;
  explicit GemvKernels(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

// The kernels' CUDA source (for tests that compile it for an architecture without a device).
const char* gemv_source();

}  // namespace kiln::cuda
