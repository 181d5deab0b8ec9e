// GEMMs through cuBLASLt: kiln's `linear` and `scaled_linear`, y[m, n] = x[m, k] · w[n, k]ᵀ (+ bias[n]) (GELU),
// row-major, in bf16 or FP8 e4m3 with f32 scales. The algorithms cuBLASLt offers for a shape are the tuning
// space: `gemm_algorithms` lists them, `gemm_run` runs one, and the tuner times them (gemm_benchmark).
//
// Layout: cuBLASLt is column-major, so the row-major product is computed as its transpose
// yᵀ[n, m] = w[n, k] · xᵀ[k, m] with A = w (op T), B = x (op N): the "TN" form that FP8 on sm_90 requires.
#pragma once

#include <cublasLt.h>
#include <cuda.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "util/result.h"

namespace kiln::cuda {

enum class GemmEpilogue { none, bias, bias_gelu };  // gelu is the tanh approximation, as kiln's gelu_tanh

// How the f32 scales of an FP8 GEMM are laid out (kiln's fp8_scaling option, ir/ops/quant.cpp):
// tensor: one scale each; channel: w per output row [n], x per token [m];
// block: w per 128x128 block [ceil(n/128), ceil(k/128)] row-major, x per 1x128 block stored k-block-major,
// [ceil(k/128), m] (tokens contiguous) — the layout cuBLASLt 13.1 reads on sm_90, measured by gpu_gemm_test.
// tensor_x_channel_w: one scale for x, one per output row of w (what fp8_scaling=tensor gives: dynamic
// activations, per-channel weights).
enum class GemmScaling { none, tensor, channel, block, tensor_x_channel_w };

struct GemmDesc {
  int64_t m = 0, n = 0, k = 0;
  DType input = DType::bf16;   // bf16 or f8e4m3 (x and w alike)
  DType output = DType::bf16;  // bf16 or f32
  GemmEpilogue epilogue = GemmEpilogue::none;
  GemmScaling scaling = GemmScaling::none;  // required for f8e4m3, none otherwise
  bool fast_accumulation = false;           // FP8 only: Hopper's faster, less precise accumulation
  // kiln's linear epilogue (ops::linear_inputs): y = scale ⊙ (x · wᵀ) + bias + residual, as cuBLASLt's
  // D = α·AB + β·C + bias with a per-feature α (CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_*) and β = 1, C = residual.
  bool scale = false;
  bool residual = false;
  // Row strides in elements of x [m, k] and y [m, n] where they are column windows of wider matrices
  // (pitched, backend.h); 0: dense (k, n). A pitched y takes no residual (C is read with y's layout).
  int64_t x_ld = 0, y_ld = 0;

  std::string str() const;  // "m=4096 n=9216 k=3072 bf16->bf16 bias"
};

struct GemmArgs {
  const void* x = nullptr;     // [m, k]
  const void* w = nullptr;     // [n, k]
  void* y = nullptr;           // [m, n]
  const void* bias = nullptr;  // [n], output dtype (bf16 for FP8 GEMMs with a bf16 output)
  const float* x_scale = nullptr;
  const float* w_scale = nullptr;
  const float* scale = nullptr;      // [n] f32, with GemmDesc::scale
  const void* residual = nullptr;    // [m, n], output dtype, with GemmDesc::residual
};

// y = ... + residual computed in place (the residual is y's own buffer): such a GEMM cannot run twice with the
// same result, so two algorithms cannot be compared on it (BlasLt::agrees).
inline bool residual_is_output(const GemmDesc& desc, const GemmArgs& args) { return desc.residual && args.residual == args.y; }

struct GemmAlgorithm {
  cublasLtMatmulAlgo_t algo;
  size_t workspace_bytes = 0;
  int heuristic_rank = 0;   // 0 = cuBLASLt's first choice; -1 = a neighbour (AlgorithmSearch::neighbours)
  std::string description;  // tile, stages, split-k... as read back from the algorithm's config
  int gemv_variant = -1;    // >= 0: not cuBLASLt's but kiln's own GEMV kernel of that variant (gemv.h); algo unused
};

// How far `BlasLt::algorithms` looks beyond cuBLASLt's heuristic list. `neighbours` adds kiln's own GEMV kernels
// for a GEMM of one row (gemv.h; right after the heuristic's answers, so that no cap leaves them out; like a
// neighbour, one is used only once it agrees with the heuristic's first answer), then configurations of the
// heuristic's answers with attributes changed, nearest first: cluster shape, custom option or CTA swizzle of
// each; split K of each; tile or stages of the first two; tile with stages of the first (gemm.cpp). They are
// kept where cublasLtMatmulAlgoCheck accepts them for the GEMM and their workspace fits, but that check passes
// configurations that compute something else: a neighbour is used only once `BlasLt::agrees` says it matches
// the heuristic's first answer. The heuristic's list is a sample of the space: on the H200 a neighbour was up
// to 1.15x faster than the best of it on FLUX's bf16 shapes (docs/performance.md).
enum class AlgorithmSearch { heuristic, neighbours };

// At most this many of the heuristic's own answers (it returns 8 on FLUX's shapes on the H200).
constexpr int kHeuristicCount = 32;

class BlasLt {
 public:
  static Result<BlasLt> create(int64_t workspace_bytes = 64ll << 20);
  BlasLt(BlasLt&&) noexcept;
  BlasLt& operator=(BlasLt&&) noexcept;
  ~BlasLt();

  // The algorithms for the shape, up to max_count: the heuristic's answers in its order, then (with
  // `neighbours`) their neighbours. Error (unsupported) naming the shape when the heuristic has none.
  Result<std::vector<GemmAlgorithm>> algorithms(const GemmDesc& desc, int max_count = 64,
                                                AlgorithmSearch search = AlgorithmSearch::heuristic) const;
  Status run(const GemmDesc& desc, const GemmAlgorithm& algorithm, const GemmArgs& args, CUstream stream) const;

  // Median ms of `reps` launches of each algorithm (after warm-up), events on `stream` with the host's launch
  // latency kept out (cuda/timer.h); rotates over the given argument sets, and before each timed launch writes a
  // buffer twice the L2's size, so that weights come from memory, not L2, as they do in a plan (each weight read
  // once a run). Timed back to back, a GEMV whose weights fit in the L2 read them from there (H100, 32 MB:
  // 11.0-13.1 us back to back, 20.1-21.5 us flushed; session 35), and one whose weights outgrow it may read the
  // tail its previous launch left, as far as its order of reading allows. On the H200, FLUX's modulation GEMV
  // (m=1, n=36864, k=3072: 226 MB) timed alone ranked #16 7% ahead of the plan's choice while in the plan the two
  // were level (session 34); that the L2 tail made the difference has not been measured there. The flush leaves
  // the L2 full of dirty lines whose write-back shares the timed launch's memory (as a previous kernel's outputs
  // do in a plan): a flushed 32 MB GEMV reads at 1.6 TB/s where a copy streams 3.0 (H100), so these figures rank
  // algorithms; they are not a GEMV's bandwidth.
  Result<std::vector<double>> benchmark(const GemmDesc& desc, const std::vector<GemmAlgorithm>& algorithms,
                                        const std::vector<GemmArgs>& rotation, CUstream stream, int reps) const;

  // Whether `candidate` computes what `reference` computes on `args`: both run into args.y on `stream` and
  // their outputs are compared on the host, within the output's rounding and a differently ordered f32
  // accumulation: |c - r| <= 2^-7 |r| + 2^-10 max|r|, NaN exactly where the other has NaN. cuBLASLt's own check
  // accepts configurations that compute something else (H200, cuBLASLt 13.1: a block-scaled neighbour with
  // cluster 4x2x1 and custom option 6), so a neighbour is used or reported only once it agrees. A residual
  // that is y itself cannot be run twice to compare: invalid_argument.
  Result<bool> agrees(const GemmDesc& desc, const GemmAlgorithm& reference, const GemmAlgorithm& candidate,
                      const GemmArgs& args, CUstream stream) const;

  static std::string version();

 private:
  struct State;
  explicit BlasLt(std::unique_ptr<State> state);
  Status run_gemv(const GemmDesc& desc, const GemmAlgorithm& algorithm, const GemmArgs& args, CUstream stream) const;
  std::unique_ptr<State> state_;
};

}  // namespace kiln::cuda
