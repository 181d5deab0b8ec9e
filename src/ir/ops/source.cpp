// Source ops: tensors made from attributes alone (constant fills and ranges), so that a graph can build
// position ids, masks and other constants without a weight file.
// Reference semantics: each element is computed in double and rounded once to the output dtype.
#include "ir/ops/op_util.h"

namespace kiln {
namespace {

using ops::attr_error;

// ---- full: shape, value, dtype -> dtype[shape] filled with value ----

Result<std::vector<TensorType>> infer_full(const OpCall& call) {
  const Shape shape = call.attrs.get_ints("shape");
  for (int64_t d : shape) {
    if (d < 0)
      return attr_error("attribute 'shape' of full must have no negative dimension, got " + shape_to_string(shape));
  }
  KILN_ASSIGN_OR_RETURN(DType dtype, ops::dtype_attr(call.attrs, "dtype", DType::f32));
  return std::vector<TensorType>{{dtype, shape}};
}

// A fill does no arithmetic; its cost is the bytes it writes.
OpCost cost_full(const OpCall& call, std::span<const TensorType> outputs) {
  return ops::streaming_cost(call, outputs, 0.0);
}

Status reference_full(const RefCall& call) {
  const double value = call.attrs.get_float("value", 0.0);
  Tensor& out = call.outputs[0];
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, value);
  return ok_status();
}

// ---- arange: size, start, step, dtype -> dtype[size], out[i] = start + i * step ----

Result<std::vector<TensorType>> infer_arange(const OpCall& call) {
  const int64_t size = call.attrs.get_int("size", 0);
  if (size < 0) return attr_error("attribute 'size' of arange must be >= 0, got " + std::to_string(size));
  KILN_ASSIGN_OR_RETURN(DType dtype, ops::dtype_attr(call.attrs, "dtype", DType::f32));
  return std::vector<TensorType>{{dtype, Shape{size}}};
}

OpCost cost_arange(const OpCall& call, std::span<const TensorType> outputs) {
  return ops::streaming_cost(call, outputs, 2.0);  // one multiply-add per element
}

// start + i * step rather than an accumulated sum: no drift over long ranges, and each element is exact
// whenever the double product is.
Status reference_arange(const RefCall& call) {
  const double start = call.attrs.get_float("start", 0.0);
  const double step = call.attrs.get_float("step", 1.0);
  Tensor& out = call.outputs[0];
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, start + static_cast<double>(i) * step);
  return ok_status();
}

const AttrSpec kFullAttrs[] = {
    {"shape", AttrKind::ints, true, "output shape, each dimension >= 0 ([] for a scalar)"},
    {"value", AttrKind::float_, true, "fill value, rounded once to the output dtype"},
    {"dtype", AttrKind::string, false, "output dtype (default \"f32\")"},
};
const AttrSpec kArangeAttrs[] = {
    {"size", AttrKind::int_, true, "number of elements, >= 0"},
    {"start", AttrKind::float_, false, "first value (default 0)"},
    {"step", AttrKind::float_, false, "difference between neighbours (default 1)"},
    {"dtype", AttrKind::string, false, "output dtype (default \"f32\")"},
};

}  // namespace

// clang-format off
const OpDef op_def_full{Op::full, "full", kTraitSource, 0, 0, kFullAttrs, infer_full, cost_full, reference_full,
                        "a tensor of one shape filled with one value"};
const OpDef op_def_arange{Op::arange, "arange", kTraitSource, 0, 0, kArangeAttrs, infer_arange, cost_arange,
                          reference_arange, "[size] with out[i] = start + i * step"};
// clang-format on

}  // namespace kiln
