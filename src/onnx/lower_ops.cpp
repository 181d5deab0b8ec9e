// Lowerings of ONNX's elementwise, logic, reduction and softmax ops to kiln ops (or to constants, when their
// inputs are known at import time), the NodeView helpers, and the dispatch over every op type the importer
// knows.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "ir/ops/op_util.h"
#include "onnx/node_view.h"

namespace kiln::onnx {

Error unsupported(const std::string& message) { return make_error(ErrorCode::unsupported, message); }

// ---- NodeView ----

Status NodeView::allow(std::initializer_list<const char*> known) const {
  for (const auto& a : node.attribute()) {
    bool ok = false;
    for (const char* k : known) ok = ok || a.name() == k;
    if (!ok) return unsupported("attribute '" + a.name() + "' is not supported");
  }
  return ok_status();
}

const ::onnx::AttributeProto* NodeView::attr(const std::string& name) const {
  for (const auto& a : node.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

namespace {
Error wrong_kind(const std::string& name, const char* want) {
  return make_error(ErrorCode::parse_error, "attribute '" + name + "' must be " + want);
}
}  // namespace

Result<int64_t> NodeView::get_int(const std::string& name, int64_t fallback) const {
  const auto* a = attr(name);
  if (!a) return fallback;
  if (a->type() != ::onnx::AttributeProto::INT) return wrong_kind(name, "an int");
  return a->i();
}

Result<double> NodeView::get_float(const std::string& name, double fallback) const {
  const auto* a = attr(name);
  if (!a) return fallback;
  if (a->type() != ::onnx::AttributeProto::FLOAT) return wrong_kind(name, "a float");
  return static_cast<double>(a->f());
}

Result<std::string> NodeView::get_string(const std::string& name, const std::string& fallback) const {
  const auto* a = attr(name);
  if (!a) return fallback;
  if (a->type() != ::onnx::AttributeProto::STRING) return wrong_kind(name, "a string");
  return a->s();
}

Result<std::optional<std::vector<int64_t>>> NodeView::get_ints(const std::string& name) const {
  const auto* a = attr(name);
  if (!a) return std::optional<std::vector<int64_t>>{};
  if (a->type() != ::onnx::AttributeProto::INTS) return wrong_kind(name, "a list of ints");
  return std::optional<std::vector<int64_t>>(std::vector<int64_t>(a->ints().begin(), a->ints().end()));
}

Result<Sym> NodeView::input(size_t i) const {
  if (!has(i)) return make_error(ErrorCode::invalid_argument, "input " + std::to_string(i) + " is missing");
  return in[i];
}

Result<TensorType> NodeView::type(size_t i) const {
  KILN_ASSIGN_OR_RETURN(Sym s, input(i));
  return im.type_of(s);
}

Result<std::shared_ptr<const Tensor>> NodeView::constant(size_t i, const char* what) const {
  KILN_ASSIGN_OR_RETURN(Sym s, input(i));
  if (!s.is_constant()) {
    return unsupported(fmt::format("input {} ({}) must be known at import time; with every dimension bound it "
                                   "should fold, but it depends on a graph input's values",
                                   i, what));
  }
  return s.tensor;
}

Result<std::vector<int64_t>> NodeView::ints(size_t i, const char* what) const {
  KILN_ASSIGN_OR_RETURN(auto t, constant(i, what));
  if (dtype_is_float(t->dtype())) return make_error(ErrorCode::invalid_argument, std::string(what) + " must be integers");
  return fold::to_ints(*t);
}

// ---- shared helpers ----

Result<Sym> reshape_to(Importer& im, const Sym& x, const Shape& shape) {
  KILN_ASSIGN_OR_RETURN(TensorType t, im.type_of(x));
  if (t.shape == shape) return x;
  if (x.is_constant()) {  // a constant keeps its data; only the shape changes
    if (shape_numel(shape) != x.tensor->numel()) {
      return make_error(ErrorCode::shape_error, "cannot reshape " + type_to_string(t) + " to " + shape_to_string(shape));
    }
    return Sym::constant(x.tensor->with_shape(shape), x.name);
  }
  return im.emit1(Op::reshape, {x}, {{"shape", shape}});
}

Result<Sym> transpose_to(Importer& im, const Sym& x, std::vector<int64_t> perm) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<int64_t>(i);
  if (identity) return x;
  KILN_ASSIGN_OR_RETURN(Sym out, im.emit1(Op::transpose, {x}, {{"perm", perm}}));
  if (out.is_constant()) out.name = x.name;
  return out;
}

namespace {

bool is_int(DType d) { return d == DType::i32 || d == DType::i64 || d == DType::boolean; }

// Casts a constant to `dtype` so that mixed-dtype ONNX forms (Pow(x, int 2)) fit kiln's one-dtype ops.
Result<Sym> cast_constant(Importer& im, const Sym& s, DType dtype) {
  if (!s.is_constant() || s.tensor->dtype() == dtype) return s;
  return im.emit1(Op::cast, {s}, {{"to", std::string(dtype_name(dtype))}});
}

}  // namespace

Result<Sym> binary_op(Importer& im, Op op, const Sym& a0, const Sym& b0) {
  KILN_ASSIGN_OR_RETURN(TensorType ta, im.type_of(a0));
  KILN_ASSIGN_OR_RETURN(TensorType tb, im.type_of(b0));
  if (a0.is_constant() && b0.is_constant() && is_int(ta.dtype) && is_int(tb.dtype)) {
    const char c = op == Op::add ? '+' : op == Op::sub ? '-' : op == Op::mul ? '*' : op == Op::div ? '/' : 0;
    if (c) {
      KILN_ASSIGN_OR_RETURN(Tensor r, fold::integer_binary(im, *a0.tensor, *b0.tensor, c));
      return Sym::constant(std::move(r));
    }
  }
  Sym a = a0, b = b0;
  if (ta.dtype != tb.dtype) {  // the constant side follows the other
    if (b.is_constant()) {
      KILN_ASSIGN_OR_RETURN(b, cast_constant(im, b, ta.dtype));
    } else if (a.is_constant()) {
      KILN_ASSIGN_OR_RETURN(a, cast_constant(im, a, tb.dtype));
    }
  }
  return im.emit1(op, {a, b});
}

namespace {

using Syms = std::vector<Sym>;

Result<Syms> one(Result<Sym> s) {
  if (!s.ok()) return s.error();
  return Syms{*s};
}

std::optional<double> constant_scalar(const Sym& s) {
  if (s.is_constant() && s.tensor->numel() == 1) return s.tensor->get(0);
  return std::nullopt;
}

// ---- elementwise ----

Result<Syms> lower_binary(NodeView& n) {
  KILN_TRY(n.allow({}));
  KILN_ASSIGN_OR_RETURN(Sym a, n.input(0));
  KILN_ASSIGN_OR_RETURN(Sym b, n.input(1));
  const std::string& t = n.node.op_type();
  // A deferred erf: scaled, offset, then multiplied by its argument's base into a GELU.
  if (a.kind == Sym::Kind::erf || b.kind == Sym::Kind::erf) {
    const bool a_erf = a.kind == Sym::Kind::erf;
    Sym e = a_erf ? a : b;
    const Sym& other = a_erf ? b : a;
    const auto c = constant_scalar(other);
    if (c && t == "Add") {
      e.erf_offset += *c;
      return Syms{e};
    }
    if (c && t == "Sub" && a_erf) {
      e.erf_offset -= *c;
      return Syms{e};
    }
    if (c && (t == "Mul" || (t == "Div" && a_erf))) {
      const double f = t == "Mul" ? *c : 1.0 / *c;
      e.erf_offset *= f;
      e.erf_scale *= f;
      return Syms{e};
    }
    if (t == "Mul" && other.is_value()) {
      KILN_ASSIGN_OR_RETURN(std::optional<Sym> g, n.im.gelu_from_erf(other, e));
      if (g) return Syms{*g};
    }
    return unsupported("Erf is supported only as part of a GELU: x * 0.5 * (1 + erf(x / sqrt(2)))");
  }
  const Op op = t == "Add" ? Op::add : t == "Sub" ? Op::sub : t == "Mul" ? Op::mul : t == "Div" ? Op::div : Op::pow;
  if (op == Op::pow) {  // x^1 and x^0.5 have cheaper kiln forms
    if (auto e = constant_scalar(b); e && a.is_value()) {
      if (*e == 1.0) return Syms{a};
      if (*e == 0.5) return one(n.im.emit1(Op::sqrt, {a}));
    }
  }
  return one(binary_op(n.im, op, a, b));
}

Result<Syms> lower_min_max(NodeView& n) {
  KILN_TRY(n.allow({}));
  const Op op = n.node.op_type() == "Max" ? Op::max : Op::min;
  KILN_ASSIGN_OR_RETURN(Sym acc, n.input(0));
  for (size_t i = 1; i < n.in.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(Sym x, n.input(i));
    KILN_ASSIGN_OR_RETURN(acc, binary_op(n.im, op, acc, x));
  }
  return Syms{acc};
}

double cmp_equal(double a, double b) { return a == b ? 1 : 0; }
double cmp_less(double a, double b) { return a < b ? 1 : 0; }
double cmp_less_equal(double a, double b) { return a <= b ? 1 : 0; }
double cmp_greater(double a, double b) { return a > b ? 1 : 0; }
double cmp_greater_equal(double a, double b) { return a >= b ? 1 : 0; }
double logic_and(double a, double b) { return (a != 0 && b != 0) ? 1 : 0; }
double logic_or(double a, double b) { return (a != 0 || b != 0) ? 1 : 0; }
double logic_xor(double a, double b) { return ((a != 0) != (b != 0)) ? 1 : 0; }
double int_mod(double a, double b) { return b == 0 ? 0 : a - b * std::floor(a / b); }

Result<Syms> lower_compare(NodeView& n) {
  KILN_TRY(n.allow({"fmod"}));
  const std::string& t = n.node.op_type();
  KILN_ASSIGN_OR_RETURN(auto a, n.constant(0, "a comparison operand"));
  KILN_ASSIGN_OR_RETURN(auto b, n.constant(1, "a comparison operand"));
  double (*fn)(double, double) = t == "Equal"            ? cmp_equal
                                 : t == "Less"           ? cmp_less
                                 : t == "LessOrEqual"    ? cmp_less_equal
                                 : t == "Greater"        ? cmp_greater
                                 : t == "GreaterOrEqual" ? cmp_greater_equal
                                 : t == "And"            ? logic_and
                                 : t == "Or"             ? logic_or
                                 : t == "Xor"            ? logic_xor
                                                         : int_mod;
  const DType out = t == "Mod" ? a->dtype() : DType::boolean;
  KILN_ASSIGN_OR_RETURN(Tensor r, fold::binary(n.im, *a, *b, out, fn));
  return Syms{Sym::constant(std::move(r))};
}

Result<Syms> lower_not(NodeView& n) {
  KILN_TRY(n.allow({}));
  KILN_ASSIGN_OR_RETURN(auto a, n.constant(0, "Not's operand"));
  Tensor r(DType::boolean, a->shape());
  for (int64_t i = 0; i < r.numel(); ++i) r.set_int(i, a->get_int(i) == 0 ? 1 : 0);
  return Syms{Sym::constant(std::move(r))};
}

Result<Syms> lower_where(NodeView& n) {
  KILN_TRY(n.allow({}));
  KILN_ASSIGN_OR_RETURN(auto c, n.constant(0, "Where's condition"));
  KILN_ASSIGN_OR_RETURN(auto x, n.constant(1, "Where's x (kiln selects only between constants)"));
  KILN_ASSIGN_OR_RETURN(auto y, n.constant(2, "Where's y (kiln selects only between constants)"));
  KILN_ASSIGN_OR_RETURN(Tensor r, fold::where(n.im, *c, *x, *y));
  return Syms{Sym::constant(std::move(r))};
}

double f_floor(double x) { return std::floor(x); }
double f_ceil(double x) { return std::ceil(x); }

Result<Syms> lower_unary(NodeView& n) {
  KILN_TRY(n.allow({}));
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  const std::string& t = n.node.op_type();
  if (t == "Erf") {
    if (x.is_constant()) {
      Tensor r = *x.tensor;
      for (int64_t i = 0; i < r.numel(); ++i) r.set(i, std::erf(r.get(i)));
      return Syms{Sym::constant(std::move(r))};
    }
    KILN_TRY(n.im.type_of(x));
    Sym e;
    e.kind = Sym::Kind::erf;
    e.value = x.value;
    return Syms{e};
  }
  if (t == "Floor" || t == "Ceil") {
    KILN_ASSIGN_OR_RETURN(auto c, n.constant(0, "Floor/Ceil's operand"));
    Tensor r = *c;
    for (int64_t i = 0; i < r.numel(); ++i) r.set(i, t == "Floor" ? f_floor(r.get(i)) : f_ceil(r.get(i)));
    return Syms{Sym::constant(std::move(r))};
  }
  if (t == "Relu") {
    KILN_ASSIGN_OR_RETURN(TensorType tt, n.im.type_of(x));
    return one(n.im.emit1(Op::max, {x, Importer::scalar(0.0, tt.dtype)}));
  }
  static const std::map<std::string, Op> kOps = {
      {"Neg", Op::neg},   {"Abs", Op::abs},   {"Exp", Op::exp},         {"Log", Op::log},
      {"Sqrt", Op::sqrt}, {"Tanh", Op::tanh}, {"Sigmoid", Op::sigmoid}, {"Reciprocal", Op::reciprocal},
      {"Cos", Op::cos},   {"Sin", Op::sin},
  };
  const Op op = kOps.at(t);
  if (op == Op::neg && x.is_constant() && is_int(x.tensor->dtype())) {
    Tensor r = *x.tensor;
    for (int64_t i = 0; i < r.numel(); ++i) r.set_int(i, static_cast<int64_t>(0ull - static_cast<uint64_t>(r.get_int(i))));
    return Syms{Sym::constant(std::move(r))};
  }
  return one(n.im.emit1(op, {x}));
}

Result<Syms> lower_identity(NodeView& n) {
  KILN_TRY(n.allow({"seed", "ratio", "training_mode"}));
  if (n.node.op_type() == "Dropout" && n.has(2)) {
    KILN_ASSIGN_OR_RETURN(auto training, n.constant(2, "training_mode"));
    if (training->numel() != 1 || training->get_int(0) != 0) return unsupported("Dropout in training mode");
  }
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  return Syms{x};
}

Result<Syms> lower_cast(NodeView& n) {
  KILN_TRY(n.allow({"to", "saturate", "round_mode"}));
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  KILN_ASSIGN_OR_RETURN(TensorType tx, n.im.type_of(x));
  DType to;
  if (n.node.op_type() == "CastLike") {
    KILN_ASSIGN_OR_RETURN(TensorType target, n.type(1));
    to = target.dtype;
  } else {
    KILN_ASSIGN_OR_RETURN(int64_t code, n.get_int("to", -1));
    auto d = onnx_elem_dtype(static_cast<int32_t>(code));
    if (!d && code == ::onnx::TensorProto::DOUBLE && x.is_constant()) d = DType::f32;  // shape arithmetic
    if (!d) return unsupported("cast to ONNX element type " + std::to_string(code) + " is not supported");
    to = *d;
  }
  if (to == tx.dtype) return Syms{x};
  return one(n.im.emit1(Op::cast, {x}, {{"to", std::string(dtype_name(to))}}));
}

// ---- reductions, softmax ----

Result<Syms> lower_reduce(NodeView& n) {
  KILN_TRY(n.allow({"axes", "keepdims", "noop_with_empty_axes"}));
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  KILN_ASSIGN_OR_RETURN(TensorType tx, n.im.type_of(x));
  KILN_ASSIGN_OR_RETURN(int64_t keepdims, n.get_int("keepdims", 1));
  KILN_ASSIGN_OR_RETURN(int64_t noop, n.get_int("noop_with_empty_axes", 0));
  KILN_ASSIGN_OR_RETURN(auto axes_attr, n.get_ints("axes"));
  std::vector<int64_t> axes;
  if (axes_attr) {
    axes = *axes_attr;
  } else if (n.has(1)) {
    KILN_ASSIGN_OR_RETURN(axes, n.ints(1, "axes"));
  }
  if (axes.empty()) {
    if (noop) return Syms{x};
    for (size_t i = 0; i < tx.shape.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  }
  if (tx.shape.empty()) return Syms{x};
  const std::string& t = n.node.op_type();
  const Op op = t == "ReduceMean" ? Op::reduce_mean : t == "ReduceSum" ? Op::reduce_sum : Op::reduce_max;
  return one(n.im.emit1(op, {x}, {{"axes", axes}, {"keepdims", keepdims ? int64_t{1} : int64_t{0}}}));
}

Result<Syms> lower_softmax(NodeView& n) {
  KILN_TRY(n.allow({"axis"}));
  KILN_ASSIGN_OR_RETURN(Sym x, n.input(0));
  KILN_ASSIGN_OR_RETURN(TensorType tx, n.im.type_of(x));
  const int64_t rank = static_cast<int64_t>(tx.shape.size());
  KILN_ASSIGN_OR_RETURN(int64_t axis, n.get_int("axis", n.im.opset() >= 13 ? -1 : 1));
  auto a = ops::normalize_axis(axis, rank);
  if (!a) return make_error(ErrorCode::invalid_argument, "axis " + std::to_string(axis) + " is out of range");
  if (n.im.opset() < 13 && *a != rank - 1) {
    return unsupported("Softmax before opset 13 over axis " + std::to_string(axis) +
                       " (it flattens the trailing axes); only the last axis is supported");
  }
  return one(n.im.emit1(Op::softmax, {x}, {{"axis", *a}}));
}

struct Entry {
  const char* op_type;
  LowerFn fn;
};

const Entry kOps[] = {
    {"Add", lower_binary},
    {"Sub", lower_binary},
    {"Mul", lower_binary},
    {"Div", lower_binary},
    {"Pow", lower_binary},
    {"Max", lower_min_max},
    {"Min", lower_min_max},
    {"Equal", lower_compare},
    {"Less", lower_compare},
    {"LessOrEqual", lower_compare},
    {"Greater", lower_compare},
    {"GreaterOrEqual", lower_compare},
    {"And", lower_compare},
    {"Or", lower_compare},
    {"Xor", lower_compare},
    {"Mod", lower_compare},
    {"Not", lower_not},
    {"Where", lower_where},
    {"Neg", lower_unary},
    {"Abs", lower_unary},
    {"Exp", lower_unary},
    {"Log", lower_unary},
    {"Sqrt", lower_unary},
    {"Reciprocal", lower_unary},
    {"Tanh", lower_unary},
    {"Sigmoid", lower_unary},
    {"Cos", lower_unary},
    {"Sin", lower_unary},
    {"Erf", lower_unary},
    {"Relu", lower_unary},
    {"Floor", lower_unary},
    {"Ceil", lower_unary},
    {"Identity", lower_identity},
    {"Dropout", lower_identity},
    {"Cast", lower_cast},
    {"CastLike", lower_cast},
    {"ReduceMean", lower_reduce},
    {"ReduceSum", lower_reduce},
    {"ReduceMax", lower_reduce},
    {"Softmax", lower_softmax},
};

}  // namespace

Result<std::vector<Sym>> lower_node(Importer& im, const ::onnx::NodeProto& node, const std::vector<Sym>& in) {
  NodeView view(im, node, in);
  const std::string& domain = node.domain();
  const bool default_domain = domain.empty() || domain == "ai.onnx";
  const bool ms_norm = domain == "com.microsoft" && node.op_type() == "SimplifiedLayerNormalization";
  if (!default_domain && !ms_norm) return unsupported("ops of domain '" + domain + "' are not supported");
  LowerFn fn = find_layer_lowering(node.op_type());
  if (!fn) fn = find_shape_lowering(node.op_type());
  for (const Entry& e : kOps) {
    if (!fn && node.op_type() == e.op_type) fn = e.fn;
  }
  if (!fn) return unsupported("op type " + node.op_type() + " is not supported by kiln's ONNX importer");
  return fn(view);
}

}  // namespace kiln::onnx
