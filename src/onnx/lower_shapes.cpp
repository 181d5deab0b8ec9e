// Lowerings of ONNX's shape and constant ops: Shape and its arithmetic fold to constants with static shapes;
// Reshape/Transpose/Concat/Split/Slice/Squeeze/Unsqueeze/Flatten/Expand/Tile/Gather become kiln views;
// Constant, ConstantOfShape, Range and Trilu build constants (masks), GatherElements folds.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "ir/ops/op_util.h"
#include "onnx/node_view.h"

namespace kiln::onnx {
namespace {

using Syms = std::vector<Sym>;

Result<Syms> one(Result<Sym> s) {
  if (!s.ok()) return s.error();
  return Syms{*s};
}

bool is_int(DType d) { return d == DType::i32 || d == DType::i64 || d == DType::boolean; }

// ---- shapes ----

Result<Syms> lower_shape(NodeView& n) {
  KILN_TRY(n.allow({"start", "end"}));
  KILN_ASSIGN_OR_RETURN(TensorType t, n.type(0));
  const auto rank = static_cast<int64_t>(t.shape.size());
  KILN_ASSIGN_OR_RETURN(int64_t start, n.get_int("start", 0));
  KILN_ASSIGN_OR_RETURN(int64_t end, n.get_int("end", rank));
  auto clampi = [&](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  start = clampi(start);
  end = clampi(end);
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(t.shape[static_cast<size_t>(i)]);
  return Syms{Sym::constant(fold::from_ints(dims))};
}

Result<Syms> lower_size(NodeView& n) {
  KILN_TRY(n.allow({}));
  KILN_ASSIGN_OR_RETURN(TensorType t, n.type(0));
  return Syms{Sym::constant(fold::from_ints({shape_numel(t.shape)}, DType::i64, Shape{}))};
}

Result<Syms> lower_reshape(NodeView& n) {
  KILN_TRY(n.allow({"allowzero", "shape"}));
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  KILN_ASSIGN_OR_RETURN(TensorType tx, n.im.type_of(x));
  KILN_ASSIGN_OR_RETURN(int64_t allowzero, n.get_int("allowzero", 0));
  KILN_ASSIGN_OR_RETURN(auto attr_shape, n.get_ints("shape"));
  std::vector<int64_t> want;
  if (attr_shape) {
    want = *attr_shape;
  } else {
    KILN_ASSIGN_OR_RETURN(want, n.ints(1, "the target shape"));
  }
  if (want.size() > 16) return make_error(ErrorCode::shape_error, "target rank above 16");
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == 0 && !allowzero) {
      if (i >= tx.shape.size()) return make_error(ErrorCode::shape_error, "0 in the target shape beyond x's rank");
      want[i] = tx.shape[i];
    }
    if (want[i] == -1) {
      if (infer >= 0) return make_error(ErrorCode::shape_error, "more than one -1 in the target shape");
      infer = static_cast<int64_t>(i);
      continue;
    }
    if (want[i] < 0) return make_error(ErrorCode::shape_error, "negative dimension in the target shape");
    if (want[i] != 0 && known > (int64_t{1} << 62) / want[i]) return make_error(ErrorCode::shape_error, "target shape too large");
    known *= want[i];
  }
  const int64_t numel = shape_numel(tx.shape);
  if (infer >= 0) {
    if (known == 0 || numel % known != 0) {
      return make_error(ErrorCode::shape_error, "cannot infer the -1 reshaping " + type_to_string(tx));
    }
    want[static_cast<size_t>(infer)] = numel / known;
  }
  return one(reshape_to(n.im, x, want));
}

Result<Syms> lower_transpose(NodeView& n) {
  KILN_TRY(n.allow({"perm"}));
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  KILN_ASSIGN_OR_RETURN(TensorType tx, n.im.type_of(x));
  KILN_ASSIGN_OR_RETURN(auto perm, n.get_ints("perm"));
  std::vector<int64_t> p;
  if (perm) {
    p = *perm;
  } else {
    for (int64_t i = static_cast<int64_t>(tx.shape.size()) - 1; i >= 0; --i) p.push_back(i);
  }
  return one(transpose_to(n.im, x, p));
}

Result<Syms> lower_concat(NodeView& n) {
  KILN_TRY(n.allow({"axis"}));
  KILN_ASSIGN_OR_RETURN(int64_t axis, n.get_int("axis", 0));
  std::vector<Sym> parts;
  for (size_t i = 0; i < n.in.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(Sym x, n.input(i));
    KILN_ASSIGN_OR_RETURN(TensorType t, n.im.type_of(x));
    if (t.shape.empty()) return make_error(ErrorCode::shape_error, "Concat of a scalar");
    const auto a = ops::normalize_axis(axis, static_cast<int64_t>(t.shape.size()));
    if (a && t.shape[static_cast<size_t>(*a)] == 0) continue;  // empty parts (shape arithmetic) add nothing
    parts.push_back(x);
  }
  if (parts.empty()) {
    KILN_ASSIGN_OR_RETURN(Sym first, n.input(0));
    parts.push_back(first);
  }
  if (parts.size() == 1) return Syms{parts[0]};
  return one(n.im.emit1(Op::concat, parts, {{"axis", axis}}));
}

Result<Syms> lower_split(NodeView& n) {
  KILN_TRY(n.allow({"axis", "split", "num_outputs"}));
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  KILN_ASSIGN_OR_RETURN(TensorType tx, n.im.type_of(x));
  KILN_ASSIGN_OR_RETURN(int64_t axis, n.get_int("axis", 0));
  const auto a = ops::normalize_axis(axis, static_cast<int64_t>(tx.shape.size()));
  if (!a) return make_error(ErrorCode::invalid_argument, "axis out of range");
  const int64_t dim = tx.shape[static_cast<size_t>(*a)];
  KILN_ASSIGN_OR_RETURN(auto split_attr, n.get_ints("split"));
  std::vector<int64_t> sizes;
  if (split_attr) {
    sizes = *split_attr;
  } else if (n.has(1)) {
    KILN_ASSIGN_OR_RETURN(sizes, n.ints(1, "split sizes"));
  } else {
    KILN_ASSIGN_OR_RETURN(int64_t parts, n.get_int("num_outputs", n.outputs()));
    if (parts <= 0 || parts > 4096) return make_error(ErrorCode::invalid_argument, "bad number of outputs");
    const int64_t each = (dim + parts - 1) / parts;
    if (!n.attr("num_outputs") && dim % parts != 0) {
      return make_error(ErrorCode::shape_error, "dim " + std::to_string(dim) + " does not split evenly");
    }
    for (int64_t i = 0, left = dim; i < parts; ++i, left -= each) sizes.push_back(std::max<int64_t>(0, std::min(each, left)));
  }
  if (static_cast<int>(sizes.size()) != n.outputs()) {
    return make_error(ErrorCode::invalid_argument, "split gives " + std::to_string(sizes.size()) + " parts for " +
                                                       std::to_string(n.outputs()) + " outputs");
  }
  if (sizes.size() == 1) return Syms{x};
  return n.im.emit(Op::split, {x}, {{"axis", *a}, {"sizes", sizes}});
}

Result<Syms> lower_slice(NodeView& n) {
  KILN_TRY(n.allow({"starts", "ends", "axes"}));
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  KILN_ASSIGN_OR_RETURN(TensorType tx, n.im.type_of(x));
  const auto rank = static_cast<int64_t>(tx.shape.size());
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.im.opset() < 10) {
    KILN_ASSIGN_OR_RETURN(auto s, n.get_ints("starts"));
    KILN_ASSIGN_OR_RETURN(auto e, n.get_ints("ends"));
    KILN_ASSIGN_OR_RETURN(auto a, n.get_ints("axes"));
    if (!s || !e) return make_error(ErrorCode::invalid_argument, "Slice needs starts and ends");
    starts = *s;
    ends = *e;
    if (a) axes = *a;
  } else {
    KILN_ASSIGN_OR_RETURN(starts, n.ints(1, "starts"));
    KILN_ASSIGN_OR_RETURN(ends, n.ints(2, "ends"));
    if (n.has(3)) {
      KILN_ASSIGN_OR_RETURN(axes, n.ints(3, "axes"));
    }
    if (n.has(4)) {
      KILN_ASSIGN_OR_RETURN(steps, n.ints(4, "steps"));
    }
  }
  if (axes.empty()) {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    return make_error(ErrorCode::invalid_argument, "starts, ends, axes and steps differ in length");
  }
  Sym out = x;
  for (size_t i = 0; i < starts.size(); ++i) {
    const auto a = ops::normalize_axis(axes[i], rank);
    if (!a) return make_error(ErrorCode::invalid_argument, "axis " + std::to_string(axes[i]) + " out of range");
    if (steps[i] <= 0) return unsupported("Slice with step " + std::to_string(steps[i]) + " (only steps > 0)");
    const int64_t dim = tx.shape[static_cast<size_t>(*a)];
    auto clamp_bound = [dim](int64_t b) { return std::clamp<int64_t>(b < 0 ? std::max<int64_t>(b, -dim) + dim : b, 0, dim); };
    const int64_t s = clamp_bound(starts[i]), e = clamp_bound(ends[i]);
    if (s == 0 && e == dim && steps[i] == 1) continue;
    KILN_ASSIGN_OR_RETURN(out, n.im.emit1(Op::slice, {out}, {{"axis", *a}, {"start", s}, {"end", e}, {"step", steps[i]}}));
  }
  return Syms{out};
}

Result<Syms> lower_squeeze(NodeView& n) {
  KILN_TRY(n.allow({"axes"}));
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  KILN_ASSIGN_OR_RETURN(TensorType tx, n.im.type_of(x));
  const auto rank = static_cast<int64_t>(tx.shape.size());
  KILN_ASSIGN_OR_RETURN(auto attr_axes, n.get_ints("axes"));
  std::vector<int64_t> axes;
  if (attr_axes) {
    axes = *attr_axes;
  } else if (n.has(1)) {
    KILN_ASSIGN_OR_RETURN(axes, n.ints(1, "axes"));
  }
  std::vector<bool> drop(static_cast<size_t>(rank), false);
  for (int64_t axis : axes) {
    const auto a = ops::normalize_axis(axis, rank);
    if (!a || tx.shape[static_cast<size_t>(*a)] != 1) {
      return make_error(ErrorCode::shape_error, "cannot squeeze axis " + std::to_string(axis) + " of " + type_to_string(tx));
    }
    drop[static_cast<size_t>(*a)] = true;
  }
  Shape out;
  for (int64_t i = 0; i < rank; ++i) {
    const bool d = axes.empty() ? tx.shape[static_cast<size_t>(i)] == 1 : drop[static_cast<size_t>(i)];
    if (!d) out.push_back(tx.shape[static_cast<size_t>(i)]);
  }
  return one(reshape_to(n.im, x, out));
}

Result<Syms> lower_unsqueeze(NodeView& n) {
  KILN_TRY(n.allow({"axes"}));
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  KILN_ASSIGN_OR_RETURN(TensorType tx, n.im.type_of(x));
  KILN_ASSIGN_OR_RETURN(auto attr_axes, n.get_ints("axes"));
  std::vector<int64_t> axes;
  if (attr_axes) {
    axes = *attr_axes;
  } else {
    KILN_ASSIGN_OR_RETURN(axes, n.ints(1, "axes"));
  }
  const auto rank = static_cast<int64_t>(tx.shape.size() + axes.size());
  if (rank > 16) return make_error(ErrorCode::shape_error, "rank above 16");
  std::vector<bool> inserted(static_cast<size_t>(rank), false);
  for (int64_t axis : axes) {
    const auto a = ops::normalize_axis(axis, rank);
    if (!a || inserted[static_cast<size_t>(*a)]) return make_error(ErrorCode::invalid_argument, "bad Unsqueeze axes");
    inserted[static_cast<size_t>(*a)] = true;
  }
  Shape out;
  size_t next = 0;
  for (int64_t i = 0; i < rank; ++i) out.push_back(inserted[static_cast<size_t>(i)] ? 1 : tx.shape[next++]);
  return one(reshape_to(n.im, x, out));
}

Result<Syms> lower_flatten(NodeView& n) {
  KILN_TRY(n.allow({"axis"}));
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  KILN_ASSIGN_OR_RETURN(TensorType tx, n.im.type_of(x));
  KILN_ASSIGN_OR_RETURN(int64_t axis, n.get_int("axis", 1));
  const auto rank = static_cast<int64_t>(tx.shape.size());
  if (axis < 0) axis += rank;
  if (axis < 0 || axis > rank) return make_error(ErrorCode::invalid_argument, "axis out of range");
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i) outer *= tx.shape[static_cast<size_t>(i)];
  const int64_t numel = shape_numel(tx.shape);
  return one(reshape_to(n.im, x, {outer, outer == 0 ? 0 : numel / outer}));
}

Result<Syms> lower_expand(NodeView& n) {
  KILN_TRY(n.allow({}));
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  KILN_ASSIGN_OR_RETURN(TensorType tx, n.im.type_of(x));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> want, n.ints(1, "the target shape"));
  for (int64_t d : want) {
    if (d < 0) return make_error(ErrorCode::shape_error, "negative dimension in Expand's shape");
  }
  KILN_ASSIGN_OR_RETURN(Shape out, fold::broadcast(tx.shape, want));
  if (out == tx.shape) return Syms{x};
  return one(n.im.emit1(Op::broadcast, {x}, {{"shape", out}}));
}

Result<Syms> lower_tile(NodeView& n) {
  KILN_TRY(n.allow({}));
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  KILN_ASSIGN_OR_RETURN(TensorType tx, n.im.type_of(x));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> reps, n.ints(1, "repeats"));
  if (reps.size() != tx.shape.size()) return make_error(ErrorCode::shape_error, "Tile repeats must match the rank");
  // x [d0, d1, ...] -> broadcast [r0, d0, r1, d1, ...] over inserted axes -> reshape [r0*d0, ...]
  Shape spread, target, out;
  for (size_t i = 0; i < reps.size(); ++i) {
    if (reps[i] < 0 || (reps[i] > 0 && tx.shape[i] > (int64_t{1} << 62) / reps[i])) {
      return make_error(ErrorCode::shape_error, "bad repeat count");
    }
    spread.insert(spread.end(), {1, tx.shape[i]});
    target.insert(target.end(), {reps[i], tx.shape[i]});
    out.push_back(reps[i] * tx.shape[i]);
  }
  KILN_ASSIGN_OR_RETURN(Sym s, reshape_to(n.im, x, spread));
  KILN_ASSIGN_OR_RETURN(s, n.im.emit1(Op::broadcast, {s}, {{"shape", target}}));
  return one(reshape_to(n.im, s, out));
}

Result<Syms> lower_gather(NodeView& n) {
  KILN_TRY(n.allow({"axis"}));
  KILN_ASSIGN_OR_RETURN(Sym data, n.input(0));
  KILN_ASSIGN_OR_RETURN(Sym idx, n.input(1));
  KILN_ASSIGN_OR_RETURN(TensorType td, n.im.type_of(data));
  KILN_ASSIGN_OR_RETURN(TensorType ti, n.im.type_of(idx));
  KILN_ASSIGN_OR_RETURN(int64_t axis, n.get_int("axis", 0));
  const auto a = ops::normalize_axis(axis, static_cast<int64_t>(td.shape.size()));
  if (!a) return make_error(ErrorCode::invalid_argument, "axis out of range for " + type_to_string(td));
  const int64_t dim = td.shape[static_cast<size_t>(*a)];
  if (idx.is_constant() && !data.is_constant()) {
    const std::vector<int64_t> values = fold::to_ints(*idx.tensor);
    std::vector<int64_t> wrapped;
    for (int64_t v : values) {
      const int64_t w = v < 0 ? v + dim : v;
      if (w < 0 || w >= dim) return make_error(ErrorCode::invalid_argument, "Gather index " + std::to_string(v) + " out of range");
      wrapped.push_back(w);
    }
    // A scalar index or an ascending run is a slice (a view the fusion passes understand).
    bool run = !wrapped.empty() && ti.shape.size() <= 1;
    for (size_t i = 1; run && i < wrapped.size(); ++i) run = wrapped[i] == wrapped[i - 1] + 1;
    if (run) {
      KILN_ASSIGN_OR_RETURN(Sym s, n.im.emit1(Op::slice, {data}, {{"axis", *a}, {"start", wrapped.front()},
                                                                   {"end", wrapped.back() + 1}}));
      if (ti.shape.empty()) {
        Shape out = td.shape;
        out.erase(out.begin() + *a);
        return one(reshape_to(n.im, s, out));
      }
      return Syms{s};
    }
  }
  if (ti.dtype != DType::i32 && ti.dtype != DType::i64) return make_error(ErrorCode::shape_error, "Gather indices must be integers");
  return one(n.im.emit1(Op::gather, {data, idx}, {{"axis", *a}}));
}

Result<Syms> lower_gather_elements(NodeView& n) {
  KILN_TRY(n.allow({"axis"}));
  KILN_ASSIGN_OR_RETURN(auto data, n.constant(0, "GatherElements data"));
  KILN_ASSIGN_OR_RETURN(auto idx, n.constant(1, "GatherElements indices"));
  KILN_ASSIGN_OR_RETURN(int64_t axis, n.get_int("axis", 0));
  KILN_ASSIGN_OR_RETURN(Tensor r, fold::gather_elements(*data, *idx, axis));
  return Syms{Sym::constant(std::move(r))};
}

// ---- constants ----

Result<Syms> lower_constant(NodeView& n) {
  KILN_TRY(n.allow({"value", "value_float", "value_floats", "value_int", "value_ints"}));
  if (n.node.attribute_size() != 1) return make_error(ErrorCode::invalid_argument, "Constant needs exactly one value attribute");
  const auto& a = n.node.attribute(0);
  if (a.name() == "value") {
    if (a.type() != ::onnx::AttributeProto::TENSOR) return make_error(ErrorCode::parse_error, "value must be a tensor");
    KILN_ASSIGN_OR_RETURN(Tensor t, decode_tensor(a.t(), ""));
    return Syms{Sym::constant(std::move(t))};
  }
  if (a.name() == "value_float") return Syms{Sym::constant(Tensor::from_f64(DType::f32, {}, std::vector<double>{a.f()}))};
  if (a.name() == "value_int") return Syms{Sym::constant(fold::from_ints({a.i()}, DType::i64, Shape{}))};
  if (a.name() == "value_ints") return Syms{Sym::constant(fold::from_ints({a.ints().begin(), a.ints().end()}))};
  std::vector<double> f(a.floats().begin(), a.floats().end());
  return Syms{Sym::constant(Tensor::from_f64(DType::f32, {static_cast<int64_t>(f.size())}, f))};
}

Result<Syms> lower_constant_of_shape(NodeView& n) {
  KILN_TRY(n.allow({"value"}));
  KILN_ASSIGN_OR_RETURN(std::vector<int64_t> shape, n.ints(0, "the shape"));
  int64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0) return make_error(ErrorCode::shape_error, "negative dimension");
    if (d > 0 && numel > n.im.fold_cap() / d) return unsupported("ConstantOfShape above the folding limit");
    numel *= d;
  }
  if (shape.size() > 16) return make_error(ErrorCode::shape_error, "rank above 16");
  KILN_TRY(n.im.charge_fold(shape));
  Tensor value(DType::f32, {1});
  if (const auto* a = n.attr("value")) {
    if (a->type() != ::onnx::AttributeProto::TENSOR) return make_error(ErrorCode::parse_error, "value must be a tensor");
    KILN_ASSIGN_OR_RETURN(value, decode_tensor(a->t(), ""));
    if (value.numel() != 1) return make_error(ErrorCode::invalid_argument, "value must hold one element");
  }
  Tensor out(value.dtype(), shape);
  const size_t es = dtype_size(value.dtype());
  for (int64_t i = 0; i < out.numel(); ++i) std::memcpy(out.data() + i * static_cast<int64_t>(es), value.data(), es);
  return Syms{Sym::constant(std::move(out))};
}

Result<Syms> lower_range(NodeView& n) {
  KILN_TRY(n.allow({}));
  KILN_ASSIGN_OR_RETURN(auto start, n.constant(0, "start"));
  KILN_ASSIGN_OR_RETURN(auto limit, n.constant(1, "limit"));
  KILN_ASSIGN_OR_RETURN(auto delta, n.constant(2, "delta"));
  if (start->numel() != 1 || limit->numel() != 1 || delta->numel() != 1) {
    return make_error(ErrorCode::shape_error, "Range needs scalar inputs");
  }
  const double s = start->get(0), l = limit->get(0), d = delta->get(0);
  if (d == 0 || !std::isfinite(s) || !std::isfinite(l) || !std::isfinite(d)) {
    return make_error(ErrorCode::invalid_argument, "Range with a zero or non-finite bound");
  }
  const double count = std::max(0.0, std::ceil((l - s) / d));
  if (count > static_cast<double>(n.im.fold_cap())) return unsupported("Range above the folding limit");
  KILN_TRY(n.im.charge_fold({static_cast<int64_t>(count)}));
  Tensor out(start->dtype(), {static_cast<int64_t>(count)});
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (is_int(out.dtype())) {
      // Wrapping arithmetic: a malformed model's overflow must not be undefined behaviour.
      const uint64_t v = static_cast<uint64_t>(start->get_int(0)) + static_cast<uint64_t>(i) * static_cast<uint64_t>(delta->get_int(0));
      out.set_int(i, static_cast<int64_t>(v));
    } else {
      out.set(i, s + static_cast<double>(i) * d);
    }
  }
  return Syms{Sym::constant(std::move(out))};
}

Result<Syms> lower_trilu(NodeView& n) {
  KILN_TRY(n.allow({"upper"}));
  KILN_ASSIGN_OR_RETURN(auto x, n.constant(0, "Trilu's input (masks fold with static shapes)"));
  int64_t k = 0;
  if (n.has(1)) {
    KILN_ASSIGN_OR_RETURN(std::vector<int64_t> kv, n.ints(1, "k"));
    if (kv.size() != 1) return make_error(ErrorCode::shape_error, "k must be a scalar");
    k = kv[0];
  }
  KILN_ASSIGN_OR_RETURN(int64_t upper, n.get_int("upper", 1));
  return Syms{Sym::constant(fold::trilu(*x, k, upper != 0))};
}

}  // namespace

LowerFn find_shape_lowering(const std::string& op_type) {
  static const std::map<std::string, LowerFn> kShapes = {
      {"Shape", lower_shape},
      {"Size", lower_size},
      {"Reshape", lower_reshape},
      {"Transpose", lower_transpose},
      {"Concat", lower_concat},
      {"Split", lower_split},
      {"Slice", lower_slice},
      {"Squeeze", lower_squeeze},
      {"Unsqueeze", lower_unsqueeze},
      {"Flatten", lower_flatten},
      {"Expand", lower_expand},
      {"Tile", lower_tile},
      {"Gather", lower_gather},
      {"GatherElements", lower_gather_elements},
      {"Constant", lower_constant},
      {"ConstantOfShape", lower_constant_of_shape},
      {"Range", lower_range},
      {"Trilu", lower_trilu},
  };
  auto it = kShapes.find(op_type);
  return it == kShapes.end() ? nullptr : it->second;
}

}  // namespace kiln::onnx
