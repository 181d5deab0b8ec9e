// Elementwise ops: binary with numpy broadcasting, unary math, cast, and the SwiGLU gate.
// Reference semantics: inputs decoded to double, the math done in double, the result rounded once to the
// output dtype (storage-faithful).
#include <cmath>
#include <numbers>

#include "ir/ops/op_util.h"

namespace kiln {
namespace {

using ops::shape_error;

// ---- binary ----

Result<std::vector<TensorType>> infer_binary(const OpCall& call) {
  KILN_ASSIGN_OR_RETURN(DType dtype, ops::common_dtype(call, "a binary op"));
  KILN_ASSIGN_OR_RETURN(Shape shape, ops::broadcast_shapes(call.inputs[0].shape, call.inputs[1].shape));
  return std::vector<TensorType>{{dtype, shape}};
}

OpCost cost_binary(const OpCall& call, std::span<const TensorType> outputs) {
  return ops::streaming_cost(call, outputs, 1.0);
}

template <double (*F)(double, double)>
Status reference_binary(const RefCall& call) {
  const Tensor& a = *call.inputs[0];
  const Tensor& b = *call.inputs[1];
  Tensor& out = call.outputs[0];
  const std::vector<int64_t> ia = ops::broadcast_offsets(a.shape(), out.shape());
  const std::vector<int64_t> ib = ops::broadcast_offsets(b.shape(), out.shape());
  const std::vector<double> va = a.to_f64(), vb = b.to_f64();
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, F(va[ia[i]], vb[ib[i]]));
  return ok_status();
}

double f_add(double a, double b) { return a + b; }
double f_sub(double a, double b) { return a - b; }
double f_mul(double a, double b) { return a * b; }
double f_div(double a, double b) { return a / b; }
// max/min propagate NaN, as torch.maximum/minimum do.
double f_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::fmax(a, b); }
double f_min(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::fmin(a, b); }
double f_pow(double a, double b) { return std::pow(a, b); }

// ---- unary ----

Result<std::vector<TensorType>> infer_unary(const OpCall& call) {
  if (!dtype_is_float(call.inputs[0].dtype)) {
    return shape_error("needs a floating input, got " + type_to_string(call.inputs[0]));
  }
  return std::vector<TensorType>{call.inputs[0]};
}

Result<std::vector<TensorType>> infer_unary_any(const OpCall& call) {
  return std::vector<TensorType>{call.inputs[0]};
}

OpCost cost_unary(const OpCall& call, std::span<const TensorType> outputs) {
  return ops::streaming_cost(call, outputs, 1.0);
}

template <double (*F)(double)>
Status reference_unary(const RefCall& call) {
  const Tensor& x = *call.inputs[0];
  Tensor& out = call.outputs[0];
  for (int64_t i = 0; i < x.numel(); ++i) out.set(i, F(x.get(i)));
  return ok_status();
}

double f_neg(double x) { return -x; }
double f_abs(double x) { return std::fabs(x); }
double f_exp(double x) { return std::exp(x); }
double f_log(double x) { return std::log(x); }
double f_sqrt(double x) { return std::sqrt(x); }
double f_rsqrt(double x) { return 1.0 / std::sqrt(x); }
double f_reciprocal(double x) { return 1.0 / x; }
double f_tanh(double x) { return std::tanh(x); }
double f_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double f_silu(double x) { return x / (1.0 + std::exp(-x)); }
double f_cos(double x) { return std::cos(x); }
double f_sin(double x) { return std::sin(x); }
double f_gelu_erf(double x) { return 0.5 * x * (1.0 + std::erf(x / std::numbers::sqrt2)); }
double f_gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

// gelu: approximate = "none" (erf) or "tanh", as torch.nn.functional.gelu.
Result<std::vector<TensorType>> infer_gelu(const OpCall& call) {
  const std::string approximate = call.attrs.get_string("approximate", "none");
  if (approximate != "none" && approximate != "tanh") {
    return ops::attr_error("attribute 'approximate' of gelu must be \"none\" or \"tanh\", got \"" + approximate + "\"");
  }
  return infer_unary(call);
}

Status reference_gelu(const RefCall& call) {
  return call.attrs.get_string("approximate", "none") == "tanh" ? reference_unary<f_gelu_tanh>(call)
                                                                : reference_unary<f_gelu_erf>(call);
}

// ---- cast ----

Result<std::vector<TensorType>> infer_cast(const OpCall& call) {
  KILN_ASSIGN_OR_RETURN(DType to, ops::dtype_attr(call.attrs, "to", DType::f32));
  return std::vector<TensorType>{{to, call.inputs[0].shape}};
}

Status reference_cast(const RefCall& call) {
  const Tensor& x = *call.inputs[0];
  Tensor& out = call.outputs[0];
  const bool integer_path = !dtype_is_float(x.dtype()) && !dtype_is_float(out.dtype());
  for (int64_t i = 0; i < x.numel(); ++i) {
    if (integer_path) {
      out.set_int(i, x.get_int(i));
    } else {
      out.set(i, x.get(i));
    }
  }
  return ok_status();
}

// ---- swiglu: x [..., 2F] -> [..., F] = silu(x[..., :F]) * x[..., F:] ----

Result<std::vector<TensorType>> infer_swiglu(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  if (x.shape.empty() || x.shape.back() % 2 != 0) {
    return shape_error("swiglu needs an even last dimension, got " + type_to_string(x));
  }
  if (!dtype_is_float(x.dtype)) return shape_error("swiglu needs a floating input, got " + type_to_string(x));
  TensorType out = x;
  out.shape.back() /= 2;
  return std::vector<TensorType>{out};
}

OpCost cost_swiglu(const OpCall& call, std::span<const TensorType> outputs) {
  return ops::streaming_cost(call, outputs, 5.0);
}

Status reference_swiglu(const RefCall& call) {
  const Tensor& x = *call.inputs[0];
  Tensor& out = call.outputs[0];
  const int64_t f = out.shape().back();
  const int64_t rows = f == 0 ? 0 : out.numel() / f;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < f; ++j) {
      const double gate = x.get(r * 2 * f + j);
      const double up = x.get(r * 2 * f + f + j);
      out.set(r * f + j, f_silu(gate) * up);
    }
  }
  return ok_status();
}

const AttrSpec kGeluAttrs[] = {{"approximate", AttrKind::string, false, "\"none\" (erf, default) or \"tanh\""}};
const AttrSpec kCastAttrs[] = {{"to", AttrKind::string, true, "target dtype"}};

constexpr uint32_t kEw = kTraitElementwise;
constexpr uint32_t kEwT = kTraitElementwise | kTraitTranscendental;

}  // namespace

#define KILN_BINARY(name, traits, summary) \
  const OpDef op_def_##name{Op::name, #name, traits, 2, 2, {}, infer_binary, cost_binary, reference_binary<f_##name>, summary, ops::all_axes_independent};
KILN_BINARY(add, kEw | kTraitCommutative, "a + b, numpy broadcasting")
KILN_BINARY(sub, kEw, "a - b, numpy broadcasting")
KILN_BINARY(mul, kEw | kTraitCommutative, "a * b, numpy broadcasting")
KILN_BINARY(div, kEw, "a / b, numpy broadcasting")
KILN_BINARY(max, kEw | kTraitCommutative, "elementwise maximum (NaN propagates)")
KILN_BINARY(min, kEw | kTraitCommutative, "elementwise minimum (NaN propagates)")
KILN_BINARY(pow, kEwT, "a ** b, numpy broadcasting")
#undef KILN_BINARY

#define KILN_UNARY(name, traits, infer, summary) \
  const OpDef op_def_##name{Op::name, #name, traits, 1, 1, {}, infer, cost_unary, reference_unary<f_##name>, summary, ops::all_axes_independent};
KILN_UNARY(neg, kEw, infer_unary_any, "-x")
KILN_UNARY(abs, kEw, infer_unary_any, "|x|")
KILN_UNARY(exp, kEwT, infer_unary, "e^x")
KILN_UNARY(log, kEwT, infer_unary, "natural logarithm")
KILN_UNARY(sqrt, kEwT, infer_unary, "square root")
KILN_UNARY(rsqrt, kEwT, infer_unary, "1 / sqrt(x)")
KILN_UNARY(reciprocal, kEw, infer_unary, "1 / x")
KILN_UNARY(tanh, kEwT, infer_unary, "hyperbolic tangent")
KILN_UNARY(sigmoid, kEwT, infer_unary, "1 / (1 + e^-x)")
KILN_UNARY(silu, kEwT | kTraitComposite, infer_unary, "x * sigmoid(x)")
KILN_UNARY(cos, kEwT, infer_unary, "cosine")
KILN_UNARY(sin, kEwT, infer_unary, "sine")
#undef KILN_UNARY

const OpDef op_def_gelu{Op::gelu, "gelu", kEwT | kTraitComposite, 1, 1, kGeluAttrs, infer_gelu, cost_unary,
                        reference_gelu, "GELU, exact (erf) or tanh approximation", ops::all_axes_independent};
const OpDef op_def_cast{Op::cast, "cast", kEw, 1, 1, kCastAttrs, infer_cast, cost_unary, reference_cast,
                        "convert to another dtype (RNE; integers truncate and saturate)", ops::all_axes_independent};
const OpDef op_def_swiglu{Op::swiglu, "swiglu", kTraitRowwise | kTraitComposite | kTraitTranscendental, 1, 1, {},
                          infer_swiglu, cost_swiglu, reference_swiglu,
                          "silu(x[..., :F]) * x[..., F:] for x [..., 2F]", ops::all_but_last_axis_independent};

}  // namespace kiln
