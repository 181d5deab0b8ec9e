// Reductions over a set of axes: sum, mean, max and amax (max of |x|, what FP8 scaling needs).
// Reference semantics: accumulate in double, round each output once to the input dtype. max and amax
// propagate NaN, as torch.amax does, so a NaN anywhere in a group is never silently dropped.
#include <cmath>
#include <limits>

#include "ir/ops/op_util.h"

namespace kiln {
namespace {

using ops::attr_error;
using ops::shape_error;

enum class ReduceKind { sum, mean, max, amax };

const char* reduce_name(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::sum: return "reduce_sum";
    case ReduceKind::mean: return "reduce_mean";
    case ReduceKind::max: return "reduce_max";
    case ReduceKind::amax: return "reduce_amax";
  }
  return "?";
}

// Which axes of the input are reduced, from the validated 'axes' attribute.
Result<std::vector<bool>> reduced_axes(const OpCall& call, const char* op) {
  const TensorType& x = call.inputs[0];
  const auto rank = static_cast<int64_t>(x.shape.size());
  const std::vector<int64_t> axes = call.attrs.get_ints("axes");
  if (axes.empty()) return attr_error(std::string("attribute 'axes' of ") + op + " must name at least one axis");
  std::vector<bool> reduced(x.shape.size(), false);
  for (int64_t axis : axes) {
    auto a = ops::normalize_axis(axis, rank);
    if (!a) {
      return attr_error("axis " + std::to_string(axis) + " of " + op + " is out of range for " + type_to_string(x) +
                        " (rank " + std::to_string(rank) + ")");
    }
    if (reduced[*a]) {
      return attr_error(std::string("attribute 'axes' of ") + op + " names axis " + std::to_string(*a) + " twice (" +
                        shape_to_string(axes) + ")");
    }
    reduced[*a] = true;
  }
  return reduced;
}

// The input shape with every reduced axis set to 1: the output shape under keepdims=1, and the shape whose
// broadcast offsets map each input element to the output element it accumulates into.
Shape kept_shape(const Shape& in, const std::vector<bool>& reduced) {
  Shape kept = in;
  for (size_t i = 0; i < in.size(); ++i) {
    if (reduced[i]) kept[i] = 1;
  }
  return kept;
}

template <ReduceKind kKind>
Result<std::vector<TensorType>> infer_reduce(const OpCall& call) {
  const char* op = reduce_name(kKind);
  const TensorType& x = call.inputs[0];
  KILN_ASSIGN_OR_RETURN(std::vector<bool> reduced, reduced_axes(call, op));
  const int64_t keepdims = call.attrs.get_int("keepdims", 0);
  if (keepdims != 0 && keepdims != 1) {
    return attr_error(std::string("attribute 'keepdims' of ") + op + " must be 0 or 1, got " +
                      std::to_string(keepdims));
  }
  // A mean stored in an integer dtype would silently truncate; the graph should cast first.
  if (kKind == ReduceKind::mean && !dtype_is_float(x.dtype)) {
    return shape_error(std::string(op) + " needs a floating input, got " + type_to_string(x) + " (cast it first)");
  }
  // max has no identity element, so an empty group has no defined result (torch raises too). amax has one: 0.
  if (kKind == ReduceKind::max) {
    for (size_t i = 0; i < x.shape.size(); ++i) {
      if (reduced[i] && x.shape[i] == 0) {
        return shape_error(std::string(op) + " over the empty axis " + std::to_string(i) + " of " + type_to_string(x) +
                           " has no defined result");
      }
    }
  }
  Shape out;
  if (keepdims) {
    out = kept_shape(x.shape, reduced);
  } else {
    for (size_t i = 0; i < x.shape.size(); ++i) {
      if (!reduced[i]) out.push_back(x.shape[i]);
    }
  }
  return std::vector<TensorType>{{x.dtype, out}};
}

// Flops are per input element (one add or compare each; amax also takes |x|); mean adds a divide per output.
template <ReduceKind kKind>
OpCost cost_reduce(const OpCall& call, std::span<const TensorType> outputs) {
  OpCost cost = ops::streaming_cost(call, outputs, kKind == ReduceKind::mean ? 1.0 : 0.0);
  const double per_input = kKind == ReduceKind::amax ? 2.0 : 1.0;
  cost.flops += per_input * static_cast<double>(shape_numel(call.inputs[0].shape));
  return cost;
}

template <ReduceKind kKind>
Status reference_reduce(const RefCall& call) {
  const Tensor& x = *call.inputs[0];
  Tensor& out = call.outputs[0];
  const std::vector<int64_t> axes = call.attrs.get_ints("axes");
  std::vector<bool> reduced(static_cast<size_t>(x.rank()), false);
  for (int64_t axis : axes) reduced[*ops::normalize_axis(axis, x.rank())] = true;
  // offsets[i]: the output element input element i accumulates into (the output is laid out like the
  // keepdims shape whether or not the size-1 axes are kept).
  const std::vector<int64_t> offsets = ops::broadcast_offsets(kept_shape(x.shape(), reduced), x.shape());

  const double init = kKind == ReduceKind::max ? -std::numeric_limits<double>::infinity() : 0.0;
  std::vector<double> acc(static_cast<size_t>(out.numel()), init);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.get(i);
    double& a = acc[offsets[i]];
    switch (kKind) {
      case ReduceKind::sum:
      case ReduceKind::mean: a += v; break;
      // Once a group holds NaN it stays NaN: NaN compares false, so guard it explicitly.
      case ReduceKind::max: a = std::isnan(a) || std::isnan(v) ? NAN : std::fmax(a, v); break;
      case ReduceKind::amax: a = std::isnan(a) || std::isnan(v) ? NAN : std::fmax(a, std::fabs(v)); break;
    }
  }
  // An empty group's mean is 0/0 = NaN, as in torch.
  const double group_size = out.numel() == 0 ? 0.0 : static_cast<double>(x.numel()) / static_cast<double>(out.numel());
  for (int64_t i = 0; i < out.numel(); ++i) out.set(i, kKind == ReduceKind::mean ? acc[i] / group_size : acc[i]);
  return ok_status();
}

const AttrSpec kReduceAttrs[] = {
    {"axes", AttrKind::ints, true, "axes to reduce, non-empty, negatives count from the end, no duplicates"},
    {"keepdims", AttrKind::int_, false, "1: keep reduced axes as size 1; 0 (default): drop them"},
};

}  // namespace

// clang-format off
// Rows are the axes before the first reduced one.
int independent_axes_reduce(const OpCall& call, std::span<const TensorType>) {
  const auto rank = static_cast<int64_t>(call.inputs[0].shape.size());
  int64_t first = rank;
  for (int64_t axis : call.attrs.get_ints("axes")) {
    if (auto a = ops::normalize_axis(axis, rank)) first = std::min(first, *a);
  }
  return static_cast<int>(first);
}

#define KILN_REDUCE(name, kind, summary)                                                                     \
  const OpDef op_def_##name{Op::name, #name, kTraitReduction, 1, 1, kReduceAttrs, infer_reduce<kind>,       \
                            cost_reduce<kind>, reference_reduce<kind>, summary, independent_axes_reduce};
KILN_REDUCE(reduce_sum, ReduceKind::sum, "sum over axes")
KILN_REDUCE(reduce_mean, ReduceKind::mean, "mean over axes (floating inputs)")
KILN_REDUCE(reduce_max, ReduceKind::max, "maximum over axes (NaN propagates)")
KILN_REDUCE(reduce_amax, ReduceKind::amax, "maximum of |x| over axes (NaN propagates)")
#undef KILN_REDUCE
// clang-format on

}  // namespace kiln
