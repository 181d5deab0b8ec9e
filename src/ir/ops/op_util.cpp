#include "ir/ops/op_util.h"

#include <cblas.h>

#include <limits>

namespace kiln::ops {

std::optional<int64_t> normalize_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank) return std::nullopt;
  return axis < 0 ? axis + rank : axis;
}

Result<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da != db && da != 1 && db != 1) {
      return shape_error("shapes " + shape_to_string(a) + " and " + shape_to_string(b) + " do not broadcast");
    }
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> broadcast_offsets(const Shape& from, const Shape& to) {
  const size_t rank = to.size();
  KILN_CHECK(from.size() <= rank);
  const size_t lead = rank - from.size();
  std::vector<int64_t> from_strides = shape_strides(from);
  // Stride in `from` per axis of `to` (0 where broadcast).
  std::vector<int64_t> stride(rank, 0);
  for (size_t i = 0; i < from.size(); ++i) stride[lead + i] = from[i] == 1 ? 0 : from_strides[i];
  const int64_t n = shape_numel(to);
  std::vector<int64_t> offsets(static_cast<size_t>(n));
  std::vector<int64_t> index(rank, 0);
  int64_t offset = 0;
  for (int64_t i = 0; i < n; ++i) {
    offsets[i] = offset;
    for (int64_t axis = static_cast<int64_t>(rank) - 1; axis >= 0; --axis) {
      if (++index[axis] < to[axis]) {
        offset += stride[axis];
        break;
      }
      offset -= stride[axis] * (to[axis] - 1);
      index[axis] = 0;
    }
  }
  return offsets;
}

OpCost streaming_cost(const OpCall& call, std::span<const TensorType> outputs, double flops_per_element) {
  OpCost cost;
  for (const TensorType& t : call.inputs) cost.bytes += static_cast<double>(type_bytes(t));
  for (const TensorType& t : outputs) {
    cost.bytes += static_cast<double>(type_bytes(t));
    cost.flops += flops_per_element * static_cast<double>(shape_numel(t.shape));
  }
  return cost;
}

Result<DType> common_dtype(const OpCall& call, const char* op) {
  KILN_CHECK(!call.inputs.empty());
  const DType d = call.inputs[0].dtype;
  for (size_t i = 1; i < call.inputs.size(); ++i) {
    if (call.inputs[i].dtype != d) {
      return shape_error(std::string(op) + " needs inputs of one dtype: input 0 is " +
                         std::string(dtype_name(d)) + ", input " + std::to_string(i) + " is " +
                         std::string(dtype_name(call.inputs[i].dtype)));
    }
  }
  return d;
}

Result<DType> dtype_attr(const Attrs& attrs, const std::string& name, DType fallback) {
  if (!attrs.has(name)) return fallback;
  const std::string s = attrs.get_string(name, "");
  auto d = parse_dtype(s);
  if (!d) return attr_error("attribute '" + name + "' names an unknown dtype '" + s + "'");
  return *d;
}

Status gemm_f64(bool b_transposed, int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t lda,
                const double* b, int64_t ldb, double beta, double* c, int64_t ldc) {
  if (m == 0 || n == 0) return ok_status();
  constexpr int64_t kBlasMax = std::numeric_limits<blasint>::max();
  for (int64_t size : {m, n, k, lda, ldb, ldc}) {
    if (size > kBlasMax) {
      return make_error(ErrorCode::unsupported,
                        "a GEMM size " + std::to_string(size) + " exceeds the BLAS integer range");
    }
  }
  if (k == 0) {  // BLAS rejects lda < 1; the product is empty, so only the beta term remains
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0.0 ? 0.0 : beta * c[i * ldc + j];
    }
    return ok_status();
  }
  cblas_dgemm(CblasRowMajor, CblasNoTrans, b_transposed ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b,
              static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
  return ok_status();
}

}  // namespace kiln::ops

namespace kiln::ops {
Result<std::vector<TensorType>> infer_pending(const OpCall&) {
  return make_error(ErrorCode::unsupported, "this op is not implemented yet");
}
OpCost cost_pending(const OpCall&, std::span<const TensorType>) { return {}; }
Status reference_pending(const RefCall&) { return make_error(ErrorCode::unsupported, "not implemented yet"); }
}  // namespace kiln::ops

namespace kiln::ops {
int all_axes_independent(const OpCall&, std::span<const TensorType> outputs) {
  return static_cast<int>(outputs[0].shape.size());
}
int all_but_last_axis_independent(const OpCall&, std::span<const TensorType> outputs) {
  return std::max(0, static_cast<int>(outputs[0].shape.size()) - 1);
}
}  // namespace kiln::ops
