// Lowering: graph nodes (a fused group or one node) -> kernel IR. See kernel_ir.h.
#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "kernel/kernel_ir.h"

namespace kiln::kernel {
namespace {

using Index = std::vector<IndexExpr>;

Error unsupported(const std::string& message) { return make_error(ErrorCode::unsupported, message); }

std::optional<ReduceKind> reduce_kind_of(Op op) {
  switch (op) {
    case Op::reduce_sum: return ReduceKind::sum;
    case Op::reduce_mean: return ReduceKind::mean;
    case Op::reduce_max: return ReduceKind::max;
    case Op::reduce_amax: return ReduceKind::amax;
    default: return std::nullopt;
  }
}

bool is_unary(Op op) {
  switch (op) {
    case Op::neg: case Op::abs: case Op::exp: case Op::log: case Op::sqrt: case Op::rsqrt: case Op::reciprocal:
    case Op::tanh: case Op::sigmoid: case Op::silu: case Op::gelu: case Op::cos: case Op::sin: return true;
    default: return false;
  }
}

bool is_binary(Op op) {
  switch (op) {
    case Op::add: case Op::sub: case Op::mul: case Op::div: case Op::max: case Op::min: case Op::pow: return true;
    default: return false;
  }
}

bool is_view(Op op) {
  switch (op) {
    case Op::reshape: case Op::transpose: case Op::broadcast: case Op::slice: case Op::split: case Op::concat:
      return true;
    default: return false;
  }
}

int64_t normalized_axis(int64_t axis, size_t rank) { return axis < 0 ? axis + static_cast<int64_t>(rank) : axis; }

// Thrown inside one lowering attempt when a stage would be read across rows: the attempt is retried with
// fewer row axes. Caught only in lower_nodes.
struct RowMismatch {};

// Every point of `vars` (row-major over their extents), as a variable -> value function (0 for the other
// variables); false past `limit`. One function and one flat table for all the points: a plan's naive kernels
// have up to 2^20 rows each, and a map per point made their byte counts most of a plan's build.
template <typename F>
bool for_each_point(const Kernel& k, const std::set<int>& vars, int64_t limit, const F& f) {
  int64_t points = 1;
  for (int v : vars) points *= k.extent(v);
  if (points > limit) return false;
  std::vector<int64_t> at(k.vars.size(), 0);
  const std::function<int64_t(int)> value = [&](int v) {
    return v >= 0 && static_cast<size_t>(v) < at.size() ? at[static_cast<size_t>(v)] : int64_t{0};
  };
  for (int64_t p = 0; p < points; ++p) {
    int64_t rest = p;
    for (int v : vars) {
      at[static_cast<size_t>(v)] = rest % k.extent(v);
      rest /= k.extent(v);
    }
    f(value);
  }
  return true;
}

// The distinct values of `v`, sorted.
void sort_unique(std::vector<int64_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

// Bytes the kernel reads from its inputs: each input's distinct elements its loads touch, not the whole
// tensor (a norm over the q third of a QKV GEMM's output reads a third of it). A load's offset is taken as a
// row part (its row variables, the local ones at 0) plus a local part: loads of one input with the same row
// part read the union of their local parts in each row, over the distinct rows of the input they reach (a
// concat piece's guarded loads wrap onto its own rows for the other pieces' rows). Where the points are too many to
// count (2^16 per row, 2^20 rows), the whole input. Capped at the input's size.
}  // namespace

double input_bytes_read(const Kernel& k) {
  const std::set<int> row(k.row_vars.begin(), k.row_vars.end());
  struct Reads {
    std::set<int> rows;
    IndexExpr row_part;
    std::vector<int64_t> locals;  // offsets past the row part, distinct and sorted
  };
  std::map<std::pair<int, std::string>, Reads> reads;  // (input, row part) -> what its loads read
  std::set<int> whole;
  for (const Expr& e : k.exprs) {
    if (e.kind != ExprKind::load) continue;
    std::set<int> rows, locals;
    for (int v : index_vars(e.offset)) (row.count(v) ? rows : locals).insert(v);
    IndexExpr row_part = e.offset;
    for (int v : locals) row_part = index_substitute(row_part, v, IndexExpr::of_constant(0), [&](int x) { return k.extent(x); });
    row_part.constant = 0;
    Reads& r = reads[{e.param, index_key(row_part)}];
    r.rows = rows;
    r.row_part = row_part;
    const bool counted = for_each_point(k, locals, 1 << 16, [&](const auto& at) {
      r.locals.push_back(index_eval(e.offset, at) - index_eval(row_part, at));
    });
    sort_unique(r.locals);  // after each load, so that many loads of one row part hold only the distinct offsets
    if (!counted) whole.insert(e.param);
  }
  std::vector<double> elements(k.inputs.size(), 0);
  for (const auto& entry : reads) {
    const auto& key = entry.first;
    const Reads& r = entry.second;  // not a structured binding: clang 14 cannot capture one in a lambda
    if (whole.count(key.first) || r.locals.empty()) continue;
    const int64_t numel = shape_numel(k.inputs[static_cast<size_t>(key.first)].type.shape);
    const int64_t first = r.locals.front();
    std::vector<int64_t> bases;  // rows of the input read (a guarded load wraps onto rows it reads anyway)
    const bool counted = for_each_point(k, r.rows, 1 << 20, [&](const auto& at) {
      const int64_t base = index_eval(r.row_part, at) + first;
      if (base >= 0 && base < numel) bases.push_back(base);
    });
    sort_unique(bases);
    const auto in_range = static_cast<int64_t>(bases.size());
    double spans = 1;
    for (int v : r.rows) spans *= static_cast<double>(k.extent(v));
    elements[static_cast<size_t>(key.first)] += static_cast<double>(r.locals.size()) * (counted ? static_cast<double>(in_range) : spans);
  }
  double bytes = 0;
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    const double numel = static_cast<double>(shape_numel(k.inputs[i].type.shape));
    const double read = whole.count(static_cast<int>(i)) ? numel : std::min(numel, elements[i]);
    bytes += read * static_cast<double>(dtype_size(k.inputs[i].type.dtype));
  }
  return bytes;
}

namespace {

class Lowerer {
 public:
  Lowerer(const Graph& g, const std::vector<NodeId>& members, size_t row_axes, const std::string& name)
      : g_(g), members_(members), member_set_(members.begin(), members.end()), row_axes_(row_axes) {
    k_.name = name;
    k_.members = members;
  }

  Result<Kernel> run(const std::vector<ValueId>& stage_values, const std::set<ValueId>& optional,
                     const std::vector<ValueId>& outputs, const Shape& row_shape) {
    k_.row_shape.assign(row_shape.begin(), row_shape.begin() + static_cast<std::ptrdiff_t>(row_axes_));
    k_.rows = shape_numel(k_.row_shape);
    for (int64_t extent : k_.row_shape) k_.row_vars.push_back(new_var(extent));
    for (ValueId v : outputs) {
      output_index_[v] = static_cast<int>(k_.outputs.size());
      k_.outputs.push_back({v, g_.value(v).name, g_.value(v).type});
      k_.bytes += static_cast<double>(type_bytes(g_.value(v).type));
    }
    for (ValueId v : stage_values) {
      const TensorType& t = g_.value(v).type;
      if (!materializable(t.shape)) {
        if (optional.count(v)) continue;
        throw RowMismatch{};
      }
      Stage s;
      s.value = v;
      s.name = g_.value(v).name;
      s.type = t;
      s.local_size = shape_numel(Shape(t.shape.begin() + static_cast<std::ptrdiff_t>(row_axes_), t.shape.end()));
      s.optional = optional.count(v) > 0;
      auto out = output_index_.find(v);
      s.output = out == output_index_.end() ? -1 : out->second;
      stage_of_[v] = static_cast<int>(k_.stages.size());
      k_.stages.push_back(s);
    }
    for (size_t i = 0; i < k_.stages.size(); ++i) {
      building_ = static_cast<int>(i);
      KILN_TRY(build_stage(k_.stages[i]));
    }
    if (error_) return *error_;
    k_.bytes += input_bytes_read(k_);
    return std::move(k_);
  }

 private:
  bool materializable(const Shape& s) const {
    if (s.size() < row_axes_) return false;
    for (size_t a = 0; a < row_axes_; ++a) {
      if (s[a] != k_.row_shape[a]) return false;
    }
    return true;
  }

  int new_var(int64_t extent) {
    if (extent == 1) return -1;
    const int id = static_cast<int>(k_.vars.size());
    k_.vars.push_back({id, extent});
    return id;
  }
  IndexExpr var_expr(int var) const { return var < 0 ? IndexExpr::of_constant(0) : IndexExpr::of_var(var); }
  VarExtents extents() const {
    return [this](int v) { return k_.extent(v); };
  }

  int add_expr(Expr e) {
    std::string key = fmt::format("{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}|", static_cast<int>(e.kind), static_cast<int>(e.op),
                                  e.gelu_tanh, static_cast<int>(e.dtype), e.param, e.stage, index_key(e.offset),
                                  e.guarded, e.value, index_key(e.condition), e.bound);
    for (int o : e.operands) key += std::to_string(o) + ",";
    key += std::to_string(e.inline_fallback);
    auto it = expr_memo_.find(key);
    if (it != expr_memo_.end()) return it->second;
    const int id = static_cast<int>(k_.exprs.size());
    k_.exprs.push_back(std::move(e));
    expr_memo_[key] = id;
    return id;
  }

  IndexExpr flat(const Index& idx, const Shape& shape, size_t from = 0) const {
    IndexExpr off;
    int64_t stride = 1;
    for (size_t a = shape.size(); a-- > from;) {
      off = index_add(off, index_scale(idx[a], stride));
      stride *= shape[a];
    }
    return off;
  }

  Status check_dtype(ValueId v) {
    const TensorType& t = g_.value(v).type;
    if (!dtype_is_float(t.dtype)) {
      const NodeId p = g_.value(v).producer;
      return unsupported(fmt::format("value %{} ({}{}) has dtype {}: generated kernels handle floating dtypes only",
                                     g_.value(v).name, p >= 0 ? g_.node_label(p) + ", " : "", type_to_string(t),
                                     dtype_name(t.dtype)));
    }
    return ok_status();
  }

  // Element `idx` of value `v`, as seen by a member.
  int value_at(ValueId v, const Index& idx, bool guarded) {
    if (error_) return 0;
    if (auto st = check_dtype(v); !st.ok()) {
      error_ = st.error();
      return 0;
    }
    const NodeId p = g_.value(v).producer;
    if (p < 0 || !member_set_.count(p)) {
      if (p >= 0 && g_.node(p).op == Op::full) {
        Expr c;
        c.kind = ExprKind::constant;
        c.value = round_to_dtype(g_.node(p).attrs.get_float("value", 0.0), g_.value(v).type.dtype);
        return add_expr(c);
      }
      Expr e;
      e.kind = ExprKind::load;
      e.param = input_param(v);
      e.dtype = g_.value(v).type.dtype;
      e.offset = flat(idx, g_.value(v).type.shape);
      e.guarded = guarded;
      return add_expr(e);
    }
    auto st = stage_of_.find(v);
    if (st != stage_of_.end()) {
      if (st->second >= building_) {
        error_ = make_error(ErrorCode::verify_error, "kernel lowering: stage order broken at %" + g_.value(v).name);
        return 0;
      }
      for (size_t a = 0; a < row_axes_; ++a) {
        const int rv = k_.row_vars[a];
        const bool aligned = rv < 0 ? (idx[a].is_constant() && idx[a].constant == 0) : idx[a].is_var(rv);
        if (!aligned) throw RowMismatch{};
      }
      Stage& s = k_.stages[st->second];
      s.read_later = true;
      Expr e;
      e.kind = ExprKind::read_stage;
      e.stage = st->second;
      e.offset = flat(idx, s.type.shape, row_axes_);
      e.guarded = guarded;
      if (s.optional) e.inline_fallback = produce(v, idx, guarded);
      return add_expr(e);
    }
    return produce(v, idx, guarded);
  }

  int input_param(ValueId v) {
    auto it = input_of_.find(v);
    if (it != input_of_.end()) return it->second;
    const int id = static_cast<int>(k_.inputs.size());
    k_.inputs.push_back({v, g_.value(v).name, g_.value(v).type});
    input_of_[v] = id;
    return id;
  }

  // Numpy broadcasting: the index of operand `shape` read by output element `idx` (trailing-aligned).
  static Index broadcast_index(const Index& idx, const Shape& shape) {
    Index out(shape.size());
    const size_t lead = idx.size() - shape.size();
    for (size_t i = 0; i < shape.size(); ++i) out[i] = shape[i] == 1 ? IndexExpr::of_constant(0) : idx[lead + i];
    return out;
  }

  int round_to(int e, DType dtype) {
    if (dtype == DType::f32) return e;
    Expr r;
    r.kind = ExprKind::round;
    r.dtype = dtype;
    r.operands = {e};
    return add_expr(r);
  }

  int produce(ValueId v, const Index& idx, bool guarded) {
    if (error_) return 0;
    const NodeId id = g_.value(v).producer;
    const Node& n = g_.node(id);
    const TensorType& out = g_.value(v).type;
    auto in_shape = [&](size_t i) -> const Shape& { return g_.value(n.inputs[i]).type.shape; };
    for (ValueId in : n.inputs) {
      if (auto st = check_dtype(in); !st.ok()) {
        error_ = st.error();
        return 0;
      }
    }
    if (is_binary(n.op)) {
      Expr e;
      e.kind = ExprKind::binary;
      e.op = n.op;
      e.operands = {value_at(n.inputs[0], broadcast_index(idx, in_shape(0)), guarded),
                    value_at(n.inputs[1], broadcast_index(idx, in_shape(1)), guarded)};
      return round_to(add_expr(e), out.dtype);
    }
    if (is_unary(n.op)) {
      Expr e;
      e.kind = ExprKind::unary;
      e.op = n.op;
      e.gelu_tanh = n.op == Op::gelu && n.attrs.get_string("approximate", "none") == "tanh";
      e.operands = {value_at(n.inputs[0], idx, guarded)};
      return round_to(add_expr(e), out.dtype);
    }
    switch (n.op) {
      case Op::cast: return round_to(value_at(n.inputs[0], idx, guarded), out.dtype);
      case Op::reshape: {
        const Shape& in = in_shape(0);
        const IndexExpr f = flat(idx, out.shape);
        const std::vector<int64_t> strides = shape_strides(in);
        Index mapped(in.size());
        for (size_t a = 0; a < in.size(); ++a) {
          mapped[a] = index_mod(index_div(f, strides[a], extents()), in[a], extents());
        }
        return value_at(n.inputs[0], mapped, guarded);
      }
      case Op::transpose: {
        const std::vector<int64_t> perm = n.attrs.get_ints("perm");
        Index mapped(perm.size());
        for (size_t i = 0; i < perm.size(); ++i) mapped[perm[i]] = idx[i];
        return value_at(n.inputs[0], mapped, guarded);
      }
      case Op::broadcast: return value_at(n.inputs[0], broadcast_index(idx, in_shape(0)), guarded);
      case Op::slice: {
        const Shape& in = in_shape(0);
        const int64_t axis = normalized_axis(n.attrs.get_int("axis", 0), in.size());
        const int64_t dim = in[axis];
        int64_t start = n.attrs.get_int("start", 0);
        if (start < 0) start += dim;
        start = std::clamp<int64_t>(start, 0, dim);
        Index mapped = idx;
        mapped[axis] = index_add(index_scale(idx[axis], n.attrs.get_int("step", 1)), IndexExpr::of_constant(start));
        return value_at(n.inputs[0], mapped, guarded);
      }
      case Op::split: {
        const Shape& in = in_shape(0);
        const int64_t axis = normalized_axis(n.attrs.get_int("axis", 0), in.size());
        const std::vector<int64_t> sizes = n.attrs.get_ints("sizes");
        int64_t offset = 0;
        for (size_t i = 0; i < n.outputs.size() && n.outputs[i] != v; ++i) offset += sizes[i];
        Index mapped = idx;
        mapped[axis] = index_add(idx[axis], IndexExpr::of_constant(offset));
        return value_at(n.inputs[0], mapped, guarded);
      }
      case Op::concat: {
        const int64_t axis = normalized_axis(n.attrs.get_int("axis", 0), out.shape.size());
        std::vector<int64_t> starts;
        int64_t at = 0;
        for (size_t i = 0; i < n.inputs.size(); ++i) {
          starts.push_back(at);
          at += in_shape(i)[axis];
        }
        starts.push_back(at);
        const IndexRange range = index_range(idx[axis], extents());
        auto piece = [&](size_t i, bool guard) {
          Index mapped = idx;
          mapped[axis] = index_add(idx[axis], IndexExpr::of_constant(-starts[i]));
          return value_at(n.inputs[i], mapped, guard);
        };
        for (size_t i = 0; i < n.inputs.size(); ++i) {
          if (range.lo >= starts[i] && range.hi < starts[i + 1]) return piece(i, guarded);
        }
        // The last non-empty piece, then selects downwards.
        size_t last = n.inputs.size() - 1;
        while (last > 0 && starts[last] == starts[last + 1]) --last;
        int result = piece(last, true);
        for (size_t i = last; i-- > 0;) {
          if (starts[i] == starts[i + 1]) continue;
          Expr s;
          s.kind = ExprKind::select;
          s.condition = idx[axis];
          s.bound = starts[i + 1];
          s.operands = {piece(i, true), result};
          result = add_expr(s);
        }
        return result;
      }
      case Op::dequantize: {
        // scale index per axis: element index / group extent along it (quant.cpp's groups).
        const Shape& q = in_shape(0);
        const Shape& scale = in_shape(1);
        const std::string granularity = n.attrs.get_string("granularity", "token");
        Index scale_idx;
        if (granularity == "token") {
          scale_idx.assign(idx.begin(), idx.end() - 1);
          scale_idx.push_back(IndexExpr::of_constant(0));
        } else if (granularity == "block") {
          const std::vector<int64_t> block = n.attrs.get_ints("block", {1, 128});
          const size_t lead = q.size() - block.size();
          for (size_t a = 0; a < q.size(); ++a) {
            scale_idx.push_back(a < lead ? idx[a] : index_div(idx[a], block[a - lead], extents()));
          }
          // scale_layout "k_major": the grid's last axis comes first (ir/ops/op_util.h).
          if (n.attrs.get_string("scale_layout", "row_major") == "k_major" && !scale_idx.empty()) {
            std::rotate(scale_idx.begin(), scale_idx.end() - 1, scale_idx.end());
          }
        }
        if (scale_idx.size() != scale.size()) {
          error_ = unsupported(g_.node_label(id) + ": scale layout not understood");
          return 0;
        }
        Expr e;
        e.kind = ExprKind::binary;
        e.op = Op::mul;
        e.operands = {value_at(n.inputs[0], idx, guarded), value_at(n.inputs[1], scale_idx, guarded)};
        return round_to(add_expr(e), out.dtype);
      }
      default:
        error_ = unsupported(g_.node_label(id) + ": op " + std::string(op_name(n.op)) +
                             " cannot be part of a generated kernel" +
                             (op_has_trait(n.op, kTraitComposite) ? " (decompose it first: kiln::passes::decompose)" : ""));
        return 0;
    }
  }

  Status build_stage(Stage& s) {
    const Node& n = g_.node(g_.value(s.value).producer);
    Index idx;
    for (size_t a = 0; a < row_axes_; ++a) idx.push_back(var_expr(k_.row_vars[a]));
    auto reduce = reduce_kind_of(n.op);
    if (!reduce) {
      s.space.assign(s.type.shape.begin() + static_cast<std::ptrdiff_t>(row_axes_), s.type.shape.end());
      for (int64_t extent : s.space) {
        s.space_vars.push_back(new_var(extent));
        idx.push_back(var_expr(s.space_vars.back()));
      }
      s.target = flat(idx, s.type.shape, row_axes_);
      s.expr = produce(s.value, idx, false);
      return error_ ? Status(*error_) : ok_status();
    }
    const ValueId in = n.inputs[0];
    const Shape& in_shape = g_.value(in).type.shape;
    if (in_shape.size() < row_axes_) throw RowMismatch{};
    s.reduce = true;
    s.reduce_kind = *reduce;
    s.space.assign(in_shape.begin() + static_cast<std::ptrdiff_t>(row_axes_), in_shape.end());
    for (int64_t extent : s.space) {
      s.space_vars.push_back(new_var(extent));
      idx.push_back(var_expr(s.space_vars.back()));
    }
    std::vector<bool> reduced(in_shape.size(), false);
    for (int64_t axis : n.attrs.get_ints("axes")) reduced[normalized_axis(axis, in_shape.size())] = true;
    for (size_t a = 0; a < row_axes_; ++a) {
      if (reduced[a]) throw RowMismatch{};
    }
    s.reduced_axes.assign(reduced.begin() + static_cast<std::ptrdiff_t>(row_axes_), reduced.end());
    const bool keepdims = n.attrs.get_int("keepdims", 0) != 0;
    Index out_idx;
    s.reduce_count = 1;
    for (size_t a = 0; a < in_shape.size(); ++a) {
      if (reduced[a]) {
        s.reduce_count *= in_shape[a];
        if (keepdims) out_idx.push_back(IndexExpr::of_constant(0));
      } else {
        out_idx.push_back(idx[a]);
      }
    }
    s.target = flat(out_idx, s.type.shape, row_axes_);
    s.expr = value_at(in, idx, false);
    return error_ ? Status(*error_) : ok_status();
  }

  const Graph& g_;
  std::vector<NodeId> members_;
  std::set<NodeId> member_set_;
  size_t row_axes_;
  Kernel k_;
  std::map<ValueId, int> stage_of_;
  std::map<ValueId, int> input_of_;
  std::map<ValueId, int> output_index_;
  std::map<std::string, int> expr_memo_;
  int building_ = 0;
  std::optional<Error> error_;
};

}  // namespace

bool kernel_supports_op(Op op) {
  return is_unary(op) || is_binary(op) || is_view(op) || reduce_kind_of(op).has_value() || op == Op::cast ||
         op == Op::dequantize;
}

namespace {

// The members as a concat along a row axis of pieces that other members compute, each piece lowered alone and
// the pieces merged (merge_concat_pieces); an error when the members are not of that form or do not merge.
Result<Kernel> lower_concat_of_pieces(const Graph& graph, const std::vector<NodeId>& members,
                                      const std::vector<ValueId>& outputs, const std::string& name) {
  if (outputs.size() != 1) return unsupported("not one output");
  const NodeId c = graph.value(outputs[0]).producer;
  const std::set<NodeId> member_set(members.begin(), members.end());
  if (c < 0 || graph.node(c).op != Op::concat || graph.node(c).inputs.size() < 2) return unsupported("not a concat");
  const Node& concat = graph.node(c);
  std::set<NodeId> covered = {c};
  std::vector<Kernel> pieces;
  for (ValueId in : concat.inputs) {
    const NodeId p = graph.value(in).producer;
    if (p < 0 || !member_set.count(p)) return unsupported("a piece is not computed by the members");
    std::vector<NodeId> piece;
    std::vector<NodeId> todo = {p};
    std::set<NodeId> seen;
    while (!todo.empty()) {
      const NodeId at = todo.back();
      todo.pop_back();
      if (!seen.insert(at).second) continue;
      if (!covered.insert(at).second) return unsupported("pieces share members");
      piece.push_back(at);
      for (ValueId v : graph.node(at).inputs) {
        const NodeId q = graph.value(v).producer;
        if (q >= 0 && member_set.count(q)) todo.push_back(q);
      }
    }
    KILN_ASSIGN_OR_RETURN(Kernel k, lower_nodes(graph, piece, name));
    if (k.outputs.size() != 1 || k.outputs[0].value != in) return unsupported("a piece has other outputs");
    pieces.push_back(std::move(k));
  }
  if (covered.size() != members.size()) return unsupported("members outside the pieces");
  const TensorType& out = graph.value(outputs[0]).type;
  const int64_t axis = normalized_axis(concat.attrs.get_int("axis", 0), out.shape.size());
  return merge_concat_pieces(pieces, axis, {outputs[0], graph.value(outputs[0]).name, out}, members, name);
}

}  // namespace

Result<Kernel> lower_nodes(const Graph& graph, const std::vector<NodeId>& members_in, const std::string& name) {
  if (members_in.empty()) return make_error(ErrorCode::invalid_argument, "kernel " + name + ": no nodes to lower");
  std::vector<NodeId> members = members_in;
  std::sort(members.begin(), members.end());
  const std::set<NodeId> member_set(members.begin(), members.end());
  for (NodeId m : members) {
    const Node& n = graph.node(m);
    if (!kernel_supports_op(n.op)) {
      return unsupported(graph.node_label(m) + ": op " + std::string(op_name(n.op)) +
                         " cannot be part of a generated kernel" +
                         (op_has_trait(n.op, kTraitComposite) ? " (decompose it first: kiln::passes::decompose)"
                          : op_has_trait(n.op, kTraitMatmul) || op_has_trait(n.op, kTraitAttention)
                              ? " (a library op: run it through Backend::run_library)"
                              : ""));
    }
    for (ValueId v : n.outputs) {
      if (!dtype_is_float(graph.value(v).type.dtype)) {
        return unsupported(graph.node_label(m) + " writes " + type_to_string(graph.value(v).type) +
                           ": generated kernels handle floating dtypes only");
      }
    }
  }
  // Uses inside the members, and which values escape.
  std::map<ValueId, int> uses;
  std::set<ValueId> escaping;
  for (const GraphOutput& o : graph.outputs()) escaping.insert(o.value);
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    for (ValueId v : graph.node(id).inputs) {
      if (member_set.count(id)) {
        ++uses[v];
      } else {
        escaping.insert(v);
      }
    }
  }
  std::vector<ValueId> outputs, stage_values;
  std::set<ValueId> optional;
  for (NodeId m : members) {
    const Node& n = graph.node(m);
    for (ValueId v : n.outputs) {
      const bool is_output = escaping.count(v) > 0;
      const bool is_reduce = reduce_kind_of(n.op).has_value();
      const bool shared = uses[v] >= 2 && !is_view(n.op);
      if (is_output) outputs.push_back(v);
      if (is_output || is_reduce || shared) stage_values.push_back(v);
      if (!is_output && !is_reduce && shared) optional.insert(v);
    }
  }
  if (outputs.empty()) {
    return make_error(ErrorCode::invalid_argument, "kernel " + name + ": its nodes produce nothing that is read");
  }
  if (auto merged = lower_concat_of_pieces(graph, members, outputs, name); merged.ok()) return merged;
  // Row axes: the common leading prefix of the mandatory stages, keeping at least one local axis, and
  // before every reduced axis.
  const Shape& first = graph.value(outputs[0]).type.shape;
  size_t rows = first.size();
  for (ValueId v : stage_values) {
    if (optional.count(v)) continue;
    const Shape& s = graph.value(v).type.shape;
    rows = std::min(rows, s.empty() ? size_t{0} : s.size() - 1);
    size_t k = 0;
    while (k < rows && k < s.size() && s[k] == first[k]) ++k;
    rows = k;
    const Node& n = graph.node(graph.value(v).producer);
    if (reduce_kind_of(n.op)) {
      const size_t rank = graph.value(n.inputs[0]).type.shape.size();
      for (int64_t axis : n.attrs.get_ints("axes")) rows = std::min(rows, static_cast<size_t>(normalized_axis(axis, rank)));
    }
  }
  for (size_t l = rows + 1; l-- > 0;) {
    try {
      Lowerer lowerer(graph, members, l, name);
      auto k = lowerer.run(stage_values, optional, outputs, first);
      if (!k.ok()) return k.error();
      // A row must fit a task's local buffers.
      for (const Stage& s : k->stages) {
        if (s.local_size > (int64_t{1} << 28)) {
          return unsupported(fmt::format("kernel {}: a row of %{} holds {} elements (rows {}), too many for one task",
                                         name, s.name, s.local_size, shape_to_string(k->row_shape)));
        }
      }
      return k;
    } catch (const RowMismatch&) {
      continue;
    }
  }
  return unsupported("kernel " + name + ": no row split fits its values");
}

int64_t Kernel::max_row_elements() const {
  int64_t m = 1;
  for (const Stage& s : stages) m = std::max(m, shape_numel(s.space));
  return m;
}

bool Kernel::has_reduction() const {
  for (const Stage& s : stages) {
    if (s.reduce) return true;
  }
  return false;
}

namespace {

std::string var_name(int v) { return "v" + std::to_string(v); }

std::string expr_text(const Expr& e) {
  auto idx = [](const IndexExpr& i) { return index_to_c(i, var_name); };
  std::string ops;
  for (int o : e.operands) ops += (ops.empty() ? "e" : ", e") + std::to_string(o);
  switch (e.kind) {
    case ExprKind::load:
      return fmt::format("load in{}[{}]{}", e.param, idx(e.offset), e.guarded ? " guarded" : "");
    case ExprKind::read_stage:
      return fmt::format("read s{}[{}]{}{}", e.stage, idx(e.offset), e.guarded ? " guarded" : "",
                         e.inline_fallback >= 0 ? " or e" + std::to_string(e.inline_fallback) : "");
    case ExprKind::constant: return fmt::format("const {}", e.value);
    case ExprKind::unary:
    case ExprKind::binary: return fmt::format("{}{}({})", op_name(e.op), e.gelu_tanh ? "_tanh" : "", ops);
    case ExprKind::round: return fmt::format("round_{}({})", dtype_name(e.dtype), ops);
    case ExprKind::select: return fmt::format("select({} < {}: {})", idx(e.condition), e.bound, ops);
  }
  return "?";
}

const char* reduce_name(ReduceKind k) {
  switch (k) {
    case ReduceKind::sum: return "sum";
    case ReduceKind::mean: return "mean";
    case ReduceKind::max: return "max";
    case ReduceKind::amax: return "amax";
  }
  return "?";
}

std::string text(const Kernel& k, bool names) {
  std::string out = fmt::format("kernel {}: rows {} ({})\n", names ? k.name : "", shape_to_string(k.row_shape), k.rows);
  for (size_t i = 0; i < k.inputs.size(); ++i) {
    out += fmt::format("  in{}  {} {}\n", i, type_to_string(k.inputs[i].type), names ? "%" + k.inputs[i].name : "");
  }
  for (size_t i = 0; i < k.outputs.size(); ++i) {
    out += fmt::format("  out{} {} {}\n", i, type_to_string(k.outputs[i].type), names ? "%" + k.outputs[i].name : "");
  }
  for (const IndexVar& v : k.vars) out += fmt::format("  var v{} < {}\n", v.id, v.extent);
  std::string rv;
  for (int v : k.row_vars) rv += (rv.empty() ? "" : ",") + (v < 0 ? std::string("0") : var_name(v));
  out += "  row vars [" + rv + "]\n";
  for (size_t i = 0; i < k.exprs.size(); ++i) out += fmt::format("  e{} = {}\n", i, expr_text(k.exprs[i]));
  for (size_t i = 0; i < k.stages.size(); ++i) {
    const Stage& s = k.stages[i];
    std::string vars;
    for (int v : s.space_vars) vars += (vars.empty() ? "" : ",") + (v < 0 ? std::string("0") : var_name(v));
    out += fmt::format("  s{} {} {} over {} [{}] {}e{} -> [{}]{}{}{}\n", i, names ? "%" + s.name : "",
                       type_to_string(s.type), shape_to_string(s.space), vars,
                       s.reduce ? std::string(reduce_name(s.reduce_kind)) + " " : "", s.expr,
                       index_to_c(s.target, var_name), s.output >= 0 ? " store out" + std::to_string(s.output) : "",
                       s.read_later ? " kept" : "", s.optional ? " optional" : "");
  }
  return out;
}

}  // namespace

std::string kernel_to_text(const Kernel& kernel) { return text(kernel, true); }

std::string kernel_hash(const Kernel& kernel) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : text(kernel, false)) h = (h ^ c) * 0x100000001b3ull;
  return fmt::format("{:016x}", h);
}

std::vector<int64_t> alias_offsets(const Kernel& k) {
  if (k.inputs.size() != 1) return {};
  std::vector<int64_t> offsets(k.outputs.size(), -1);
  for (const Stage& s : k.stages) {
    if (s.reduce || s.output < 0 || s.optional) return {};
    const Expr& e = k.exprs[s.expr];
    if (e.kind != ExprKind::load || e.guarded || k.inputs[0].type.dtype != s.type.dtype) return {};
    // Each loop variable must step the input exactly as it steps the output.
    const std::vector<int64_t> strides = shape_strides(s.type.shape);
    std::map<int, int64_t> want;
    for (size_t a = 0; a < k.row_vars.size(); ++a) {
      if (k.row_vars[a] >= 0) want[k.row_vars[a]] = strides[a];
    }
    for (size_t a = 0; a < s.space_vars.size(); ++a) {
      if (s.space_vars[a] >= 0) want[s.space_vars[a]] = strides[k.row_vars.size() + a];
    }
    std::map<int, int64_t> got;
    for (const IndexTerm& t : e.offset.terms) {
      if (t.atom.kind != IndexAtom::Kind::var) return {};
      got[t.atom.var] = t.coefficient;
    }
    if (got != want) return {};
    offsets[static_cast<size_t>(s.output)] = e.offset.constant;
  }
  return offsets;
}

std::optional<PitchedWindow> pitched_window(const Kernel& k) {
  if (k.inputs.size() != 1 || k.outputs.size() != 1) return std::nullopt;
  const Stage* store = nullptr;
  for (const Stage& s : k.stages) {
    if (s.reduce || s.optional || s.output < 0 || store) return std::nullopt;
    store = &s;
  }
  if (!store) return std::nullopt;
  const Expr& e = k.exprs[store->expr];
  if (e.kind != ExprKind::load || e.guarded || k.inputs[0].type.dtype != store->type.dtype) return std::nullopt;
  // Each loop variable's step in the output (dense) and in the input, with its extent.
  const Shape& shape = store->type.shape;
  const std::vector<int64_t> strides = shape_strides(shape);
  struct Var {
    int64_t want = 0, extent = 1;
  };
  std::map<int, Var> vars;
  for (size_t a = 0; a < k.row_vars.size(); ++a) {
    if (k.row_vars[a] >= 0) vars[k.row_vars[a]] = {strides[a], shape[a]};
  }
  for (size_t a = 0; a < store->space_vars.size(); ++a) {
    const size_t axis = k.row_vars.size() + a;
    if (store->space_vars[a] >= 0) vars[store->space_vars[a]] = {strides[axis], shape[axis]};
  }
  std::map<int, int64_t> got;
  for (const IndexTerm& t : e.offset.terms) {
    if (t.atom.kind != IndexAtom::Kind::var || !vars.count(t.atom.var)) return std::nullopt;
    got[t.atom.var] = t.coefficient;
  }
  // The row: the span of the variables that step the input as they step the output; every other variable
  // steps whole rows, by one common pitch.
  int64_t row = shape_numel(shape);
  for (const auto& [v, var] : vars) {
    if (var.extent > 1 && got[v] != var.want) row = std::min(row, var.want);
  }
  if (row == shape_numel(shape)) return std::nullopt;  // dense: alias_offsets' case
  std::optional<int64_t> pitch;
  for (const auto& [v, var] : vars) {
    if (var.extent <= 1) continue;
    if (var.want < row) {
      if (got[v] != var.want || var.want * var.extent > row) return std::nullopt;
      continue;
    }
    if (var.want % row != 0 || got[v] % (var.want / row) != 0) return std::nullopt;
    const int64_t p = got[v] / (var.want / row);
    if (pitch && *pitch != p) return std::nullopt;
    pitch = p;
  }
  if (!pitch || *pitch < row) return std::nullopt;
  return PitchedWindow{e.offset.constant, row, *pitch};
}

}  // namespace kiln::kernel
