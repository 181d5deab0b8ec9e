// Row-wise composites: layernorm and rmsnorm over the last axis, softmax over one axis, and rotary position
// embedding (rope) over pairs of the last axis. Fusion passes treat each as one row kernel; a decomposition
// into primitives must match these references.
// Reference semantics: a whole row is read in double, statistics are kept in double, and each output is
// rounded once to the output dtype (x's dtype), whatever the dtypes of the weights.
#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "ir/ops/op_util.h"

namespace kiln {
namespace {

using ops::attr_error;
using ops::shape_error;

// x must be floating and have a last axis to normalize over.
Status check_row_input(const TensorType& x, const char* op) {
  if (!dtype_is_float(x.dtype)) {
    return shape_error(std::string(op) + " needs a floating input, got " + type_to_string(x));
  }
  if (x.shape.empty()) return shape_error(std::string(op) + " needs an input of rank >= 1, got " + type_to_string(x));
  return ok_status();
}

// An optional per-channel parameter (weight, bias) must be a floating vector [D].
Status check_channel_param(const TensorType& p, int64_t d, const char* op, const char* what) {
  if (p.shape != Shape{d}) {
    return shape_error(std::string(op) + " " + what + " must be [" + std::to_string(d) + "], got " + type_to_string(p));
  }
  if (!dtype_is_float(p.dtype)) {
    return shape_error(std::string(op) + " " + what + " must be floating, got " + type_to_string(p));
  }
  return ok_status();
}

Status check_eps(const OpCall& call, double fallback, const char* op) {
  const double eps = call.attrs.get_float("eps", fallback);
  if (!(eps >= 0.0) || std::isinf(eps)) {
    return attr_error(fmt::format("attribute 'eps' of {} must be finite and >= 0, got {}", op, eps));
  }
  return ok_status();
}

// ---- layernorm(x, [weight], [bias]), rmsnorm(x, [weight]): normalize each row of x [..., D] ----

constexpr double kLayernormEps = 1e-5;
constexpr double kRmsnormEps = 1e-6;

Result<std::vector<TensorType>> infer_layernorm(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  KILN_TRY(check_row_input(x, "layernorm"));
  KILN_TRY(check_eps(call, kLayernormEps, "layernorm"));
  if (call.inputs.size() > 1) KILN_TRY(check_channel_param(call.inputs[1], x.shape.back(), "layernorm", "weight"));
  if (call.inputs.size() > 2) KILN_TRY(check_channel_param(call.inputs[2], x.shape.back(), "layernorm", "bias"));
  return std::vector<TensorType>{x};
}

Result<std::vector<TensorType>> infer_rmsnorm(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  KILN_TRY(check_row_input(x, "rmsnorm"));
  KILN_TRY(check_eps(call, kRmsnormEps, "rmsnorm"));
  if (call.inputs.size() > 1) KILN_TRY(check_channel_param(call.inputs[1], x.shape.back(), "rmsnorm", "weight"));
  return std::vector<TensorType>{x};
}

// Per element: layernorm subtracts, squares, accumulates twice, scales and applies the affine (~8);
// rmsnorm squares, accumulates, scales and multiplies by the weight (~4).
OpCost cost_layernorm(const OpCall& call, std::span<const TensorType> outputs) {
  return ops::streaming_cost(call, outputs, 8.0);
}
OpCost cost_rmsnorm(const OpCall& call, std::span<const TensorType> outputs) {
  return ops::streaming_cost(call, outputs, 4.0);
}

// Rows of x [rows, D] as flat index ranges.
struct Rows {
  int64_t count;
  int64_t length;
};
Rows rows_of(const Tensor& x) {
  const int64_t d = x.shape().back();
  return {d == 0 ? 0 : x.numel() / d, d};
}

template <bool kCentered>
Status reference_norm(const RefCall& call, double default_eps) {
  const Tensor& x = *call.inputs[0];
  const Tensor* weight = call.inputs.size() > 1 ? call.inputs[1] : nullptr;
  const Tensor* bias = call.inputs.size() > 2 ? call.inputs[2] : nullptr;
  Tensor& out = call.outputs[0];
  const double eps = call.attrs.get_float("eps", default_eps);
  const Rows rows = rows_of(x);
  std::vector<double> row(static_cast<size_t>(rows.length));
  for (int64_t r = 0; r < rows.count; ++r) {
    for (int64_t j = 0; j < rows.length; ++j) row[j] = x.get(r * rows.length + j);
    // Two passes (mean, then squared deviations) rather than E[x^2] - E[x]^2, which cancels badly for rows
    // with a large mean.
    double mean = 0.0;
    if (kCentered) {
      for (double v : row) mean += v;
      mean /= static_cast<double>(rows.length);
    }
    double sum_squares = 0.0;
    for (double v : row) sum_squares += (v - mean) * (v - mean);
    const double inv_rms = 1.0 / std::sqrt(sum_squares / static_cast<double>(rows.length) + eps);
    for (int64_t j = 0; j < rows.length; ++j) {
      double y = (row[j] - mean) * inv_rms;
      if (weight) y *= weight->get(j);
      if (bias) y += bias->get(j);
      out.set(r * rows.length + j, y);
    }
  }
  return ok_status();
}

Status reference_layernorm(const RefCall& call) { return reference_norm<true>(call, kLayernormEps); }
Status reference_rmsnorm(const RefCall& call) { return reference_norm<false>(call, kRmsnormEps); }

// ---- softmax(x) over `axis`: exp(x - max) / sum(exp(x - max)) ----

Result<std::vector<TensorType>> infer_softmax(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  if (!dtype_is_float(x.dtype)) return shape_error("softmax needs a floating input, got " + type_to_string(x));
  const int64_t axis = call.attrs.get_int("axis", -1);
  if (!ops::normalize_axis(axis, static_cast<int64_t>(x.shape.size()))) {
    return attr_error("axis " + std::to_string(axis) + " of softmax is out of range for " + type_to_string(x) +
                      " (rank " + std::to_string(x.shape.size()) + ")");
  }
  return std::vector<TensorType>{x};
}

// Max, subtract, exp, accumulate, divide.
OpCost cost_softmax(const OpCall& call, std::span<const TensorType> outputs) {
  return ops::streaming_cost(call, outputs, 5.0);
}

Status reference_softmax(const RefCall& call) {
  const Tensor& x = *call.inputs[0];
  Tensor& out = call.outputs[0];
  const int64_t axis = *ops::normalize_axis(call.attrs.get_int("axis", -1), x.rank());
  // x viewed as [outer, n, inner] with the softmax axis in the middle.
  const int64_t n = x.shape()[axis];
  const int64_t inner = shape_strides(x.shape())[axis];
  const int64_t outer = n * inner == 0 ? 0 : x.numel() / (n * inner);
  std::vector<double> row(static_cast<size_t>(n));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * n * inner + i;
      // Subtracting the row max keeps exp() from overflowing; it does not change the result. A NaN makes the
      // whole row NaN through the sum, as in torch.
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < n; ++j) {
        row[j] = x.get(base + j * inner);
        max = std::fmax(max, row[j]);
      }
      double sum = 0.0;
      for (int64_t j = 0; j < n; ++j) {
        row[j] = std::exp(row[j] - max);
        sum += row[j];
      }
      for (int64_t j = 0; j < n; ++j) out.set(base + j * inner, row[j] / sum);
    }
  }
  return ok_status();
}

// ---- rope(x, cos, sin): rotate pairs of x [..., D] by angles whose cos/sin broadcast to [..., D/2] ----

// "interleaved" pairs (x[2i], x[2i+1]) (GPT-J, Flux); "half" pairs (x[i], x[i + D/2]) (GPT-NeoX, Llama).
enum class RopeStyle { interleaved, half };

Result<RopeStyle> rope_style(const Attrs& attrs) {
  const std::string style = attrs.get_string("style", "interleaved");
  if (style == "interleaved") return RopeStyle::interleaved;
  if (style == "half") return RopeStyle::half;
  return attr_error("attribute 'style' of rope must be \"interleaved\" or \"half\", got \"" + style + "\"");
}

// The shape cos and sin must broadcast to: x.shape[:-1] + [D/2], one angle per pair.
Shape rope_angle_shape(const Shape& x) {
  Shape angles = x;
  angles.back() /= 2;
  return angles;
}

Result<std::vector<TensorType>> infer_rope(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  const TensorType& cos = call.inputs[1];
  const TensorType& sin = call.inputs[2];
  KILN_TRY(rope_style(call.attrs));
  if (!dtype_is_float(x.dtype)) return shape_error("rope needs a floating x, got " + type_to_string(x));
  if (x.shape.empty() || x.shape.back() % 2 != 0) {
    return shape_error("rope needs x with an even last dimension, got " + type_to_string(x));
  }
  if (!dtype_is_float(cos.dtype) || !dtype_is_float(sin.dtype)) {
    return shape_error("rope needs floating cos and sin, got " + type_to_string(cos) + " and " + type_to_string(sin));
  }
  if (cos.shape != sin.shape) {
    return shape_error("rope cos and sin must have one shape, got " + type_to_string(cos) + " and " +
                       type_to_string(sin));
  }
  const Shape angles = rope_angle_shape(x.shape);
  auto joined = ops::broadcast_shapes(cos.shape, angles);
  if (!joined.ok() || *joined != angles) {
    return shape_error("rope cos/sin " + type_to_string(cos) + " must broadcast to " + shape_to_string(angles) +
                       " (x.shape[:-1] + [D/2] for x " + type_to_string(x) + ")");
  }
  return std::vector<TensorType>{x};
}

// Per output element: two multiplies and an add.
OpCost cost_rope(const OpCall& call, std::span<const TensorType> outputs) {
  return ops::streaming_cost(call, outputs, 3.0);
}

Status reference_rope(const RefCall& call) {
  const Tensor& x = *call.inputs[0];
  const Tensor& cos = *call.inputs[1];
  const Tensor& sin = *call.inputs[2];
  Tensor& out = call.outputs[0];
  KILN_ASSIGN_OR_RETURN(const RopeStyle style, rope_style(call.attrs));
  const int64_t d = x.shape().back();
  const int64_t half = d / 2;
  // angle[t]: the cos/sin element of pair t of the flattened [rows, D/2] angle grid.
  const std::vector<int64_t> angle = ops::broadcast_offsets(cos.shape(), rope_angle_shape(x.shape()));
  const int64_t rows = d == 0 ? 0 : x.numel() / d;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < half; ++i) {
      // The pair's two element indices in x (and out).
      const int64_t i0 = r * d + (style == RopeStyle::interleaved ? 2 * i : i);
      const int64_t i1 = r * d + (style == RopeStyle::interleaved ? 2 * i + 1 : i + half);
      const double c = cos.get(angle[r * half + i]);
      const double s = sin.get(angle[r * half + i]);
      const double x0 = x.get(i0), x1 = x.get(i1);
      out.set(i0, x0 * c - x1 * s);
      out.set(i1, x0 * s + x1 * c);
    }
  }
  return ok_status();
}

const AttrSpec kLayernormAttrs[] = {{"eps", AttrKind::float_, false, "added to the variance (default 1e-5)"}};
const AttrSpec kRmsnormAttrs[] = {{"eps", AttrKind::float_, false, "added to the mean square (default 1e-6)"}};
const AttrSpec kSoftmaxAttrs[] = {{"axis", AttrKind::int_, false, "axis to normalize over (default -1)"}};
const AttrSpec kRopeAttrs[] = {{"style", AttrKind::string, false,
                                "\"interleaved\" (default): pairs (x[2i], x[2i+1]); \"half\": (x[i], x[i+D/2])"}};

constexpr uint32_t kRowComposite = kTraitRowwise | kTraitComposite;

}  // namespace

// Rows are the axes before the softmax axis.
int independent_axes_softmax(const OpCall& call, std::span<const TensorType>) {
  const auto rank = static_cast<int64_t>(call.inputs[0].shape.size());
  return static_cast<int>(ops::normalize_axis(call.attrs.get_int("axis", -1), rank).value_or(0));
}

// clang-format off
const OpDef op_def_layernorm{Op::layernorm, "layernorm", kRowComposite | kTraitTranscendental, 1, 3, kLayernormAttrs,
                             infer_layernorm, cost_layernorm, reference_layernorm,
                             "(x - mean) / sqrt(var + eps) * weight + bias over the last axis",
                             ops::all_but_last_axis_independent};
const OpDef op_def_rmsnorm{Op::rmsnorm, "rmsnorm", kRowComposite | kTraitTranscendental, 1, 2, kRmsnormAttrs,
                           infer_rmsnorm, cost_rmsnorm, reference_rmsnorm,
                           "x / sqrt(mean(x^2) + eps) * weight over the last axis",
                           ops::all_but_last_axis_independent};
const OpDef op_def_softmax{Op::softmax, "softmax", kRowComposite | kTraitTranscendental, 1, 1, kSoftmaxAttrs,
                           infer_softmax, cost_softmax, reference_softmax, "exp(x) / sum(exp(x)) over one axis",
                           independent_axes_softmax};
const OpDef op_def_rope{Op::rope, "rope", kRowComposite, 3, 3, kRopeAttrs, infer_rope, cost_rope, reference_rope,
                        "rotary embedding: rotate pairs of the last axis by (cos, sin)",
                        ops::all_but_last_axis_independent};
// clang-format on

}  // namespace kiln
