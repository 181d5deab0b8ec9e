// Shared helpers for op definitions: axis normalization, broadcasting, cost formulas, and the reference
// executor's element loops. Only ir/ops/*.cpp include this, except for the FP8 block-scale layouts, which the
// backends' GEMMs read too.
#pragma once

#include <string>
#include <vector>

#include "ir/ops.h"

namespace kiln::ops {

inline Error shape_error(std::string message) { return make_error(ErrorCode::shape_error, std::move(message)); }
inline Error attr_error(std::string message) { return make_error(ErrorCode::invalid_argument, std::move(message)); }

// Maps a possibly negative axis into [0, rank); nullopt when out of range.
std::optional<int64_t> normalize_axis(int64_t axis, int64_t rank);

// Numpy broadcasting of two shapes; an error names both shapes.
Result<Shape> broadcast_shapes(const Shape& a, const Shape& b);

// Offsets into a row-major tensor of shape `from` read as if broadcast to `to` (rank of `from` <= rank of
// `to`, trailing-aligned): offsets[i] is the flat index in `from` of element i of `to`.
std::vector<int64_t> broadcast_offsets(const Shape& from, const Shape& to);

// Cost of an op that reads every input and writes every output once, with `flops_per_element` per output
// element.
OpCost streaming_cost(const OpCall& call, std::span<const TensorType> outputs, double flops_per_element);

// All inputs must share one dtype; returns it or an error naming the first that differs.
Result<DType> common_dtype(const OpCall& call, const char* op);

// Parses a dtype-valued string attribute.
Result<DType> dtype_attr(const Attrs& attrs, const std::string& name, DType fallback);

// Row-major double GEMM through BLAS: c[m,n] = alpha * a[m,k] * op(b) + beta * c, where op(b) is b[k,n] or,
// with `b_transposed`, the transpose of b[n,k]. Empty sizes are handled (k = 0 gives beta * c). Fails (as
// unsupported) when a size exceeds what the BLAS integer type holds.
Status gemm_f64(bool b_transposed, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

}  // namespace kiln::ops

namespace kiln::ops {
// The FP8 block-scale layouts a block-scaled GEMM reads: cuBLASLt's on sm_90, as measured on the H200
// (cuBLASLt 13.1, tests/cuda/gpu_gemm_test.cpp). One definition for quantize (which writes activation scales),
// scaled_linear (which reads both), pack-scales and the backends, so producer and consumer cannot disagree.
//   weight w[N, K], 128x128 blocks (CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F): a row-major grid of N/128
//     rows. Checkpoints store it dense, [N/128, K/128] (DeepSeek's `weight_scale_inv`); cuBLASLt reads rows of
//     round_up(K/128, 4) scales (padded; measured: a dense [4, 2] grid read as garbage on the H200), which
//     pack-scales writes at load time where the two differ. Readers take the row stride from the grid's shape.
//   activation x[..., K], 1x128 blocks (CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F): k-block-major,
//     [K/128, ...], the tokens of one K block contiguous (quantize's scale_layout "k_major").
// Block counts round up: a ragged last block has its own scale.
inline constexpr int64_t kScaleBlock = 128;
inline constexpr int64_t kGemmScaleRowAlign = 4;  // cuBLASLt's weight grid: rows padded to 4 scales
inline int64_t scale_blocks(int64_t extent) { return (extent + kScaleBlock - 1) / kScaleBlock; }
inline Shape weight_block_scale_shape(int64_t n, int64_t k) { return {scale_blocks(n), scale_blocks(k)}; }
// The grid as the GEMM reads it: each row padded to a multiple of kGemmScaleRowAlign scales.
inline Shape gemm_weight_block_scale_shape(int64_t n, int64_t k) {
  const int64_t row = (scale_blocks(k) + kGemmScaleRowAlign - 1) / kGemmScaleRowAlign * kGemmScaleRowAlign;
  return {scale_blocks(n), row};
}
// Flat index of the scale of w[row, col] in a weight grid whose rows hold `row_stride` scales (its shape[1]).
inline int64_t weight_block_scale_index(int64_t row, int64_t col, int64_t row_stride) {
  return row / kScaleBlock * row_stride + col / kScaleBlock;
}
inline Shape activation_block_scale_shape(const Shape& x) {
  Shape s = {scale_blocks(x.empty() ? 1 : x.back())};
  if (!x.empty()) s.insert(s.end(), x.begin(), x.end() - 1);
  return s;
}
// Flat index of the scale of x[row, col] (row over the leading axes flattened, `rows` of them).
inline int64_t activation_block_scale_index(int64_t row, int64_t col, int64_t rows) {
  return col / kScaleBlock * rows + row;
}
}  // namespace kiln::ops

namespace kiln::ops {
// attention's operand layouts (q_layout, k_layout, v_layout, out_layout; ir/ops/attention.cpp), shared with the
// backends like the block-scale layouts above. `operand` 0..2 is q, k, v and 3 the output; true when it is
// token-major [batch, seq, heads, dim] ("bshd") rather than head-major [batch, heads, seq, dim] ("bhsd").
// Inference has validated the attributes; an invalid value reads as head-major.
bool attention_token_major(const Attrs& attrs, int operand);
// An attention operand's shape in head-major order [b, h, s, d], from its shape as stored in either layout.
inline Shape attention_head_major_shape(const Shape& s, bool token_major) {
  return token_major ? Shape{s[0], s[2], s[1], s[3]} : s;
}
}  // namespace kiln::ops

namespace kiln::ops {
// Placeholder for an op whose family file is being written: inference reports it as unsupported.
Result<std::vector<TensorType>> infer_pending(const OpCall& call);
OpCost cost_pending(const OpCall& call, std::span<const TensorType> outputs);
Status reference_pending(const RefCall& call);
}  // namespace kiln::ops
#define KILN_PENDING_OP(name)                                                                           \
  const OpDef op_def_##name{Op::name, #name, 0, 0, -1, {}, ops::infer_pending, ops::cost_pending, \
                            ops::reference_pending, "not implemented yet"};

namespace kiln::ops {
// IndependentAxesFn helpers: every output axis independent (elementwise); all but the last (row ops over
// the last axis); all but the last two (ops over 2-D trailing tiles).
int all_axes_independent(const OpCall& call, std::span<const TensorType> outputs);
int all_but_last_axis_independent(const OpCall& call, std::span<const TensorType> outputs);
}  // namespace kiln::ops

namespace kiln::ops {

// Where linear's optional inputs sit: x, w, then bias [N], a per-feature scale [N] (f32; attr `scale` = 1) and a
// residual [..., N] (attr `residual` = 1), each present or not (-1), in that order. The op computes
// y = scale ⊙ (x · wᵀ) + bias + residual: the epilogue D = α·AB + β·C + bias of cuBLASLt with a per-feature α
// and β = 1, one rounding to the output dtype. `count` is the number of inputs; a count that fits no layout
// leaves bias at -2.
struct LinearInputs {
  int bias = -1, scale = -1, residual = -1;
};
LinearInputs linear_inputs(size_t count, const Attrs& attrs);

}  // namespace kiln::ops
