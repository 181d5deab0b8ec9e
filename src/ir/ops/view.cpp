// Data movement: reshape, transpose, broadcast, concat, split, slice and gather (embedding lookup). None does
// arithmetic, so the references copy stored bytes: results are bit-exact for every dtype, NaN payloads
// included. Costs count the bytes a copy must move (reshape moves none: it only renames the layout).
#include <algorithm>
#include <cstring>
#include <string>

#include "ir/ops/op_util.h"

namespace kiln {
namespace {

using ops::shape_error;

// Copies a strided view of `src` into `dst`, row-major over `shape`: output element `index` comes from source
// element `offset + sum_a index[a] * stride[a]`. Contiguous innermost runs are copied in one memcpy.
void strided_copy(const std::byte* src, int64_t offset, const std::vector<int64_t>& stride, const Shape& shape,
                  size_t element_size, std::byte* dst) {
  const int64_t numel = shape_numel(shape);
  if (numel == 0) return;
  const auto es = static_cast<int64_t>(element_size);
  if (shape.empty()) {
    std::memcpy(dst, src + offset * es, element_size);
    return;
  }
  const size_t rank = shape.size();
  const int64_t row_length = shape.back();
  const int64_t inner_stride = stride.back();
  std::vector<int64_t> index(rank - 1, 0);
  for (int64_t row = 0; row < numel / row_length; ++row) {
    const std::byte* from = src + offset * es;
    std::byte* to = dst + row * row_length * es;
    if (inner_stride == 1) {
      std::memcpy(to, from, static_cast<size_t>(row_length * es));
    } else {
      for (int64_t j = 0; j < row_length; ++j) std::memcpy(to + j * es, from + j * inner_stride * es, element_size);
    }
    for (int64_t axis = static_cast<int64_t>(rank) - 2; axis >= 0; --axis) {
      if (++index[axis] < shape[axis]) {
        offset += stride[axis];
        break;
      }
      offset -= stride[axis] * (shape[axis] - 1);
      index[axis] = 0;
    }
  }
}

// A tensor read as [outer, axis, inner] around `axis`: concat, split and gather copy runs of whole inner blocks.
struct AxisSplit {
  int64_t outer = 1, dim = 1, inner = 1;
};
AxisSplit split_at(const Shape& shape, int64_t axis) {
  AxisSplit s;
  for (int64_t i = 0; i < axis; ++i) s.outer *= shape[i];
  s.dim = shape[axis];
  for (size_t i = static_cast<size_t>(axis) + 1; i < shape.size(); ++i) s.inner *= shape[i];
  return s;
}

Result<int64_t> axis_attr(const OpCall& call, const char* op, int64_t fallback) {
  const int64_t axis = call.attrs.get_int("axis", fallback);
  const auto rank = static_cast<int64_t>(call.inputs[0].shape.size());
  auto normalized = ops::normalize_axis(axis, rank);
  if (!normalized) {
    return shape_error(std::string(op) + ": axis " + std::to_string(axis) + " is out of range for " +
                       type_to_string(call.inputs[0]) + " (rank " + std::to_string(rank) + ")");
  }
  return *normalized;
}

OpCost cost_copy(const OpCall& call, std::span<const TensorType> outputs) {
  return ops::streaming_cost(call, outputs, 0.0);
}

// ---- reshape ----

Result<std::vector<TensorType>> infer_reshape(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  Shape shape = call.attrs.get_ints("shape");
  int64_t inferred = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (inferred >= 0) return shape_error("reshape: shape " + shape_to_string(shape) + " has more than one -1");
      inferred = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      return shape_error("reshape: shape " + shape_to_string(shape) + " has a negative dim other than -1");
    } else if (__builtin_mul_overflow(known, shape[i], &known)) {
      return shape_error("reshape: shape " + shape_to_string(shape) + " has more elements than int64 holds");
    }
  }
  const int64_t numel = shape_numel(x.shape);
  if (inferred >= 0) {
    if (known == 0 || numel % known != 0) {
      return shape_error("reshape: cannot infer the -1 in " + shape_to_string(shape) + " for " + type_to_string(x) +
                         " (" + std::to_string(numel) + " elements)");
    }
    shape[inferred] = numel / known;
  } else if (known != numel) {
    return shape_error("reshape: cannot reshape " + type_to_string(x) + " (" + std::to_string(numel) +
                       " elements) to " + shape_to_string(shape) + " (" + std::to_string(known) + " elements)");
  }
  return std::vector<TensorType>{{x.dtype, shape}};
}

OpCost cost_reshape(const OpCall&, std::span<const TensorType>) { return {}; }

Status reference_reshape(const RefCall& call) {
  const Tensor& x = *call.inputs[0];
  if (x.byte_size() > 0) std::memcpy(call.outputs[0].data(), x.data(), x.byte_size());
  return ok_status();
}

// ---- transpose: out.shape[i] = x.shape[perm[i]] ----

Result<std::vector<TensorType>> infer_transpose(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  const std::vector<int64_t> perm = call.attrs.get_ints("perm");
  const size_t rank = x.shape.size();
  std::vector<bool> seen(rank, false);
  bool valid = perm.size() == rank;
  for (size_t i = 0; valid && i < rank; ++i) {
    valid = perm[i] >= 0 && perm[i] < static_cast<int64_t>(rank) && !seen[perm[i]];
    if (valid) seen[perm[i]] = true;
  }
  if (!valid) {
    return shape_error("transpose: perm " + shape_to_string(perm) + " is not a permutation of 0.." +
                       std::to_string(static_cast<int64_t>(rank) - 1) + " for " + type_to_string(x));
  }
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) out[i] = x.shape[perm[i]];
  return std::vector<TensorType>{{x.dtype, out}};
}

Status reference_transpose(const RefCall& call) {
  const Tensor& x = *call.inputs[0];
  Tensor& out = call.outputs[0];
  const std::vector<int64_t> perm = call.attrs.get_ints("perm");
  const std::vector<int64_t> x_strides = shape_strides(x.shape());
  std::vector<int64_t> stride(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) stride[i] = x_strides[perm[i]];
  strided_copy(x.data(), 0, stride, out.shape(), dtype_size(x.dtype()), out.data());
  return ok_status();
}

// ---- broadcast: numpy expand to `shape` (trailing-aligned; a dim of 1 repeats) ----

Result<std::vector<TensorType>> infer_broadcast(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  const Shape shape = call.attrs.get_ints("shape");
  const std::string what = "broadcast: cannot expand " + type_to_string(x) + " to " + shape_to_string(shape);
  if (shape.size() < x.shape.size()) return shape_error(what + ": the target has a lower rank");
  const size_t lead = shape.size() - x.shape.size();
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0) return shape_error(what + ": negative target dim");
    if (i >= lead && x.shape[i - lead] != 1 && x.shape[i - lead] != shape[i]) {
      return shape_error(what + ": dim " + std::to_string(i - lead) + " of x is " +
                         std::to_string(x.shape[i - lead]) + ", neither 1 nor " + std::to_string(shape[i]));
    }
  }
  return std::vector<TensorType>{{x.dtype, shape}};
}

Status reference_broadcast(const RefCall& call) {
  const Tensor& x = *call.inputs[0];
  Tensor& out = call.outputs[0];
  const size_t lead = out.shape().size() - x.shape().size();
  const std::vector<int64_t> x_strides = shape_strides(x.shape());
  std::vector<int64_t> stride(out.shape().size(), 0);
  for (size_t i = 0; i < x.shape().size(); ++i) stride[lead + i] = x.shape()[i] == 1 ? 0 : x_strides[i];
  strided_copy(x.data(), 0, stride, out.shape(), dtype_size(x.dtype()), out.data());
  return ok_status();
}

// ---- concat along `axis` ----

Result<std::vector<TensorType>> infer_concat(const OpCall& call) {
  KILN_ASSIGN_OR_RETURN(DType dtype, ops::common_dtype(call, "concat"));
  const TensorType& first = call.inputs[0];
  if (first.shape.empty()) return shape_error("concat needs inputs of rank >= 1, got " + type_to_string(first));
  KILN_ASSIGN_OR_RETURN(int64_t axis, axis_attr(call, "concat", 0));
  Shape out = first.shape;
  out[axis] = 0;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const Shape& s = call.inputs[i].shape;
    bool fits = s.size() == first.shape.size();
    for (size_t d = 0; fits && d < s.size(); ++d) fits = static_cast<int64_t>(d) == axis || s[d] == first.shape[d];
    if (!fits) {
      return shape_error("concat: input " + std::to_string(i) + " " + type_to_string(call.inputs[i]) +
                         " does not match input 0 " + type_to_string(first) + " outside axis " +
                         std::to_string(axis));
    }
    if (__builtin_add_overflow(out[axis], s[axis], &out[axis])) {
      return shape_error("concat: the inputs' dim " + std::to_string(axis) + " sum past what int64 holds");
    }
  }
  return std::vector<TensorType>{{dtype, out}};
}

Status reference_concat(const RefCall& call) {
  Tensor& out = call.outputs[0];
  const int64_t axis = *ops::normalize_axis(call.attrs.get_int("axis", 0), out.rank());
  const AxisSplit o = split_at(out.shape(), axis);
  const auto es = static_cast<int64_t>(dtype_size(out.dtype()));
  int64_t position = 0;  // where this input starts along the axis
  for (const Tensor* in : call.inputs) {
    const AxisSplit s = split_at(in->shape(), axis);
    const int64_t run = s.dim * s.inner * es;
    for (int64_t r = 0; run > 0 && r < o.outer; ++r) {
      std::memcpy(out.data() + (r * o.dim + position) * o.inner * es, in->data() + r * run, static_cast<size_t>(run));
    }
    position += s.dim;
  }
  return ok_status();
}

// ---- split along `axis` into len(sizes) outputs ----

Result<std::vector<TensorType>> infer_split(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  if (x.shape.empty()) return shape_error("split needs an input of rank >= 1, got " + type_to_string(x));
  KILN_ASSIGN_OR_RETURN(int64_t axis, axis_attr(call, "split", 0));
  const std::vector<int64_t> sizes = call.attrs.get_ints("sizes");
  if (sizes.empty()) return shape_error("split: sizes must not be empty");
  for (int64_t size : sizes) {
    if (size < 0) return shape_error("split: sizes " + shape_to_string(sizes) + " has a negative size");
  }
  int64_t total = 0;
  std::vector<TensorType> outputs;
  for (int64_t size : sizes) {
    if (size > x.shape[axis] - total) {  // checked before adding: the sum could pass int64
      return shape_error("split: sizes " + shape_to_string(sizes) + " sum past dim " + std::to_string(axis) +
                         " of " + type_to_string(x) + " (" + std::to_string(x.shape[axis]) + ")");
    }
    total += size;
    TensorType t = x;
    t.shape[axis] = size;
    outputs.push_back(t);
  }
  if (total != x.shape[axis]) {
    return shape_error("split: sizes " + shape_to_string(sizes) + " sum to " + std::to_string(total) + ", but dim " +
                       std::to_string(axis) + " of " + type_to_string(x) + " is " + std::to_string(x.shape[axis]));
  }
  return outputs;
}

Status reference_split(const RefCall& call) {
  const Tensor& x = *call.inputs[0];
  const int64_t axis = *ops::normalize_axis(call.attrs.get_int("axis", 0), x.rank());
  const AxisSplit s = split_at(x.shape(), axis);
  const auto es = static_cast<int64_t>(dtype_size(x.dtype()));
  int64_t position = 0;
  for (Tensor& out : call.outputs) {
    const int64_t dim = out.shape()[axis];
    const int64_t run = dim * s.inner * es;
    for (int64_t r = 0; run > 0 && r < s.outer; ++r) {
      std::memcpy(out.data() + r * run, x.data() + (r * s.dim + position) * s.inner * es, static_cast<size_t>(run));
    }
    position += dim;
  }
  return ok_status();
}

// ---- slice: x[..., start:end:step, ...] along `axis`, Python semantics ----

struct SliceRange {
  int64_t start, length, step;
};

// Python's slice.indices for step > 0: negative bounds count from the end, then both clamp to [0, dim].
SliceRange slice_range(const Attrs& attrs, int64_t dim) {
  auto clamp_bound = [dim](int64_t bound) {
    if (bound < 0) bound += dim;
    return std::clamp<int64_t>(bound, 0, dim);
  };
  const int64_t start = clamp_bound(attrs.get_int("start", 0));
  const int64_t end = clamp_bound(attrs.get_int("end", dim));
  const int64_t step = attrs.get_int("step", 1);
  const int64_t length = end > start ? (end - start + step - 1) / step : 0;
  return {start, length, step};
}

Result<std::vector<TensorType>> infer_slice(const OpCall& call) {
  const TensorType& x = call.inputs[0];
  if (x.shape.empty()) return shape_error("slice needs an input of rank >= 1, got " + type_to_string(x));
  KILN_ASSIGN_OR_RETURN(int64_t axis, axis_attr(call, "slice", 0));
  const int64_t step = call.attrs.get_int("step", 1);
  if (step <= 0) return ops::attr_error("attribute 'step' of slice must be > 0, got " + std::to_string(step));
  TensorType out = x;
  out.shape[axis] = slice_range(call.attrs, x.shape[axis]).length;
  return std::vector<TensorType>{out};
}

// Reads only the selected elements: the output's bytes, once read and once written.
OpCost cost_slice(const OpCall&, std::span<const TensorType> outputs) {
  return {0.0, 2.0 * static_cast<double>(type_bytes(outputs[0]))};
}

Status reference_slice(const RefCall& call) {
  const Tensor& x = *call.inputs[0];
  Tensor& out = call.outputs[0];
  const int64_t axis = *ops::normalize_axis(call.attrs.get_int("axis", 0), x.rank());
  const SliceRange range = slice_range(call.attrs, x.shape()[axis]);
  std::vector<int64_t> stride = shape_strides(x.shape());
  const int64_t offset = range.start * stride[axis];
  stride[axis] *= range.step;
  strided_copy(x.data(), offset, stride, out.shape(), dtype_size(x.dtype()), out.data());
  return ok_status();
}

// ---- gather: out = data.shape[:axis] + indices.shape + data.shape[axis+1:] ----

Result<std::vector<TensorType>> infer_gather(const OpCall& call) {
  const TensorType& data = call.inputs[0];
  const TensorType& indices = call.inputs[1];
  if (data.shape.empty()) return shape_error("gather needs data of rank >= 1, got " + type_to_string(data));
  if (indices.dtype != DType::i32 && indices.dtype != DType::i64) {
    return shape_error("gather: indices must be i32 or i64, got " + type_to_string(indices));
  }
  KILN_ASSIGN_OR_RETURN(int64_t axis, axis_attr(call, "gather", 0));
  Shape out(data.shape.begin(), data.shape.begin() + axis);
  out.insert(out.end(), indices.shape.begin(), indices.shape.end());
  out.insert(out.end(), data.shape.begin() + axis + 1, data.shape.end());
  return std::vector<TensorType>{{data.dtype, out}};
}

// Reads the indices and the gathered rows (as many bytes as the output), writes the output.
OpCost cost_gather(const OpCall& call, std::span<const TensorType> outputs) {
  return {0.0, static_cast<double>(type_bytes(call.inputs[1])) + 2.0 * static_cast<double>(type_bytes(outputs[0]))};
}

Status reference_gather(const RefCall& call) {
  const Tensor& data = *call.inputs[0];
  const Tensor& indices = *call.inputs[1];
  Tensor& out = call.outputs[0];
  const int64_t axis = *ops::normalize_axis(call.attrs.get_int("axis", 0), data.rank());
  const AxisSplit s = split_at(data.shape(), axis);
  const int64_t count = indices.numel();
  // Indices come from data (token ids), so a bad one is an expected failure, checked before any copy.
  std::vector<int64_t> rows(static_cast<size_t>(count));
  for (int64_t n = 0; n < count; ++n) {
    const int64_t index = indices.get_int(n);
    const int64_t wrapped = index < 0 ? index + s.dim : index;
    if (wrapped < 0 || wrapped >= s.dim) {
      return make_error(ErrorCode::invalid_argument,
                        "gather: index " + std::to_string(index) + " (element " + std::to_string(n) +
                            " of the indices) is out of range for dim " + std::to_string(axis) + " of size " +
                            std::to_string(s.dim) + " in data " + type_to_string({data.dtype(), data.shape()}));
    }
    rows[n] = wrapped;
  }
  const auto run = static_cast<int64_t>(dtype_size(data.dtype())) * s.inner;
  for (int64_t o = 0; run > 0 && o < s.outer; ++o) {
    for (int64_t n = 0; n < count; ++n) {
      std::memcpy(out.data() + (o * count + n) * run, data.data() + (o * s.dim + rows[n]) * run,
                  static_cast<size_t>(run));
    }
  }
  return ok_status();
}

const AttrSpec kReshapeAttrs[] = {{"shape", AttrKind::ints, true, "new shape; at most one -1, inferred"}};
const AttrSpec kTransposeAttrs[] = {
    {"perm", AttrKind::ints, true, "a permutation of 0..rank-1: output dim i is input dim perm[i]"}};
const AttrSpec kBroadcastAttrs[] = {{"shape", AttrKind::ints, true, "target shape (numpy broadcast_to rules)"}};
const AttrSpec kConcatAttrs[] = {{"axis", AttrKind::int_, true, "axis to join along; negative counts from the end"}};
const AttrSpec kSplitAttrs[] = {
    {"axis", AttrKind::int_, true, "axis to split; negative counts from the end"},
    {"sizes", AttrKind::ints, true, "size of each output along axis; they sum to the dim"},
};
const AttrSpec kSliceAttrs[] = {
    {"axis", AttrKind::int_, true, "axis to slice; negative counts from the end"},
    {"start", AttrKind::int_, true, "first index (Python rules: negative counts from the end, clamped)"},
    {"end", AttrKind::int_, true, "one past the last index (Python rules)"},
    {"step", AttrKind::int_, false, "stride, > 0; default 1"},
};
const AttrSpec kGatherAttrs[] = {
    {"axis", AttrKind::int_, false, "axis of data that indices select along; default 0"}};

}  // namespace

// Independent rows of views: the leading axes a view leaves untouched.
int independent_axes_reshape(const OpCall& call, std::span<const TensorType> outputs) {
  const Shape& in = call.inputs[0].shape;
  const Shape& out = outputs[0].shape;
  size_t k = 0;
  while (k < in.size() && k < out.size() && in[k] == out[k]) ++k;
  return static_cast<int>(k);
}
int independent_axes_transpose(const OpCall& call, std::span<const TensorType>) {
  const std::vector<int64_t> perm = call.attrs.get_ints("perm");
  size_t k = 0;
  while (k < perm.size() && perm[k] == static_cast<int64_t>(k)) ++k;
  return static_cast<int>(k);
}
int independent_axes_broadcast(const OpCall& call, std::span<const TensorType> outputs) {
  const Shape& in = call.inputs[0].shape;
  const Shape& out = outputs[0].shape;
  if (in.size() != out.size()) return 0;  // new leading axes: every row reads the same input
  size_t k = 0;
  while (k < in.size() && in[k] == out[k]) ++k;
  return static_cast<int>(k);
}
int independent_axes_before_axis(const OpCall& call, std::span<const TensorType>) {
  const auto rank = static_cast<int64_t>(call.inputs[0].shape.size());
  return static_cast<int>(ops::normalize_axis(call.attrs.get_int("axis", 0), rank).value_or(0));
}

const OpDef op_def_reshape{Op::reshape, "reshape", kTraitView, 1, 1, kReshapeAttrs, infer_reshape, cost_reshape,
                           reference_reshape, "same elements in a new shape (row-major order kept)",
                           independent_axes_reshape};
const OpDef op_def_transpose{Op::transpose, "transpose", kTraitView, 1, 1, kTransposeAttrs, infer_transpose,
                             cost_copy, reference_transpose, "permute dims: out.shape[i] = x.shape[perm[i]]",
                             independent_axes_transpose};
const OpDef op_def_broadcast{Op::broadcast, "broadcast", kTraitView, 1, 1, kBroadcastAttrs, infer_broadcast,
                             cost_copy, reference_broadcast, "expand to a shape, numpy rules", independent_axes_broadcast};
const OpDef op_def_concat{Op::concat, "concat", kTraitView, 1, -1, kConcatAttrs, infer_concat, cost_copy,
                          reference_concat, "join inputs along an axis", independent_axes_before_axis};
const OpDef op_def_split{Op::split, "split", kTraitView, 1, 1, kSplitAttrs, infer_split, cost_copy,
                         reference_split, "cut along an axis into pieces of given sizes", independent_axes_before_axis};
const OpDef op_def_slice{Op::slice, "slice", kTraitView, 1, 1, kSliceAttrs, infer_slice, cost_slice,
                         reference_slice, "x[start:end:step] along an axis, Python semantics", independent_axes_before_axis};
const OpDef op_def_gather{Op::gather, "gather", kTraitView, 2, 2, kGatherAttrs, infer_gather, cost_gather,
                          reference_gather, "select along an axis by i32/i64 indices (embedding lookup)"};

}  // namespace kiln
