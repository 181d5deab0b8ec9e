#include "passes/decompose.h"

#include <fmt/format.h>

#include "ir/ops/op_util.h"
#include "passes/graph_copier.h"

namespace kiln::passes {
namespace {

// Emits primitives into the target graph under readable names derived from the composite's output.
class Emitter {
 public:
  Emitter(Graph& g, std::string stem) : g_(g), stem_(std::move(stem)) {}

  ValueId op(Op o, std::vector<ValueId> in, Attrs attrs = {}, const std::string& name = "") {
    const std::string n = name.empty() ? g_.unique_name(stem_ + "/" + std::string(op_name(o))) : name;
    auto out = g_.add_node(o, std::move(in), std::move(attrs), {n});
    if (!out.ok()) {
      std::fprintf(stderr, "kiln: internal error in decompose: %s\n", out.error().message.c_str());
      KILN_CHECK(out.ok());
    }
    return (*out)[0];
  }
  std::vector<ValueId> ops(Op o, std::vector<ValueId> in, Attrs attrs, size_t outputs) {
    std::vector<std::string> names;
    for (size_t i = 0; i < outputs; ++i) names.push_back(g_.unique_name(stem_ + "/" + std::string(op_name(o))));
    auto out = g_.add_node(o, std::move(in), std::move(attrs), names);
    KILN_CHECK(out.ok());
    return *out;
  }
  const TensorType& type(ValueId v) const { return g_.value(v).type; }
  const Shape& shape(ValueId v) const { return g_.value(v).type.shape; }

  ValueId to_f32(ValueId v) {
    return type(v).dtype == DType::f32 ? v : op(Op::cast, {v}, {{"to", std::string("f32")}});
  }
  // The final cast back to the composite's dtype carries the composite's own output name.
  ValueId finish(ValueId v, DType dtype, const std::string& name) {
    if (type(v).dtype == dtype) return op(Op::reshape, {v}, {{"shape", shape(v)}}, name);
    return op(Op::cast, {v}, {{"to", std::string(dtype_name(dtype))}}, name);
  }
  ValueId scalar(double value) {
    return op(Op::full, {}, {{"shape", std::vector<int64_t>{}}, {"value", value}, {"dtype", std::string("f32")}});
  }
  ValueId reduce(Op o, ValueId v, std::vector<int64_t> axes) {
    return op(o, {v}, {{"axes", std::move(axes)}, {"keepdims", int64_t{1}}});
  }
  ValueId slice_last(ValueId v, int64_t start, int64_t end) {
    return op(Op::slice, {v}, {{"axis", int64_t{-1}}, {"start", start}, {"end", end}});
  }
  ValueId reshape(ValueId v, Shape s) { return op(Op::reshape, {v}, {{"shape", std::move(s)}}); }

 private:
  Graph& g_;
  std::string stem_;
};

// Each rule maps one composite node (inputs already in the target graph) to primitives; it returns false
// when the composite stays as it is.
using Rule = bool (*)(Emitter& e, const Node& node, const std::vector<ValueId>& in,
                      const std::vector<std::string>& names);

bool decompose_norm(Emitter& e, const Node& node, const std::vector<ValueId>& in,
                    const std::vector<std::string>& names) {
  const bool layer = node.op == Op::layernorm;
  const DType dtype = e.type(in[0]).dtype;
  const double eps = node.attrs.get_float("eps", layer ? 1e-5 : 1e-6);
  ValueId x = e.to_f32(in[0]);
  if (layer) x = e.op(Op::sub, {x, e.reduce(Op::reduce_mean, x, {-1})});
  ValueId power = e.reduce(Op::reduce_mean, e.op(Op::mul, {x, x}), {-1});
  ValueId rstd = e.op(Op::rsqrt, {e.op(Op::add, {power, e.scalar(eps)})});
  ValueId y = e.op(Op::mul, {x, rstd});
  if (in.size() > 1) y = e.op(Op::mul, {y, e.to_f32(in[1])});
  if (in.size() > 2) y = e.op(Op::add, {y, e.to_f32(in[2])});
  e.finish(y, dtype, names[0]);
  return true;
}

bool decompose_softmax(Emitter& e, const Node& node, const std::vector<ValueId>& in,
                       const std::vector<std::string>& names) {
  const int64_t axis = node.attrs.get_int("axis", -1);
  ValueId x = e.to_f32(in[0]);
  ValueId shifted = e.op(Op::sub, {x, e.reduce(Op::reduce_max, x, {axis})});
  ValueId ex = e.op(Op::exp, {shifted});
  e.finish(e.op(Op::div, {ex, e.reduce(Op::reduce_sum, ex, {axis})}), e.type(in[0]).dtype, names[0]);
  return true;
}

bool decompose_swiglu(Emitter& e, const Node&, const std::vector<ValueId>& in,
                      const std::vector<std::string>& names) {
  const int64_t f = e.shape(in[0]).back() / 2;
  ValueId x = e.to_f32(in[0]);
  ValueId gate = e.op(Op::silu, {e.slice_last(x, 0, f)});
  e.finish(e.op(Op::mul, {gate, e.slice_last(x, f, 2 * f)}), e.type(in[0]).dtype, names[0]);
  return true;
}

// x [..., D] with cos/sin broadcast to [..., D/2]. Interleaved pairs are (x[2i], x[2i+1]): viewed as
// [..., D/2, 2] with cos/sin given a trailing unit axis. Half-split pairs are (x[i], x[i + D/2]).
bool decompose_rope(Emitter& e, const Node& node, const std::vector<ValueId>& in,
                    const std::vector<std::string>& names) {
  const Shape x_shape = e.shape(in[0]);
  const int64_t d = x_shape.back();
  const bool interleaved = node.attrs.get_string("style", "interleaved") == "interleaved";
  ValueId x = e.to_f32(in[0]);
  ValueId c = e.to_f32(in[1]);
  ValueId s = e.to_f32(in[2]);
  ValueId x0, x1;
  if (interleaved) {
    Shape pairs = x_shape;
    pairs.back() = d / 2;
    pairs.push_back(2);
    x = e.reshape(x, pairs);
    Shape cs = e.shape(c);
    cs.push_back(1);
    c = e.reshape(c, cs);
    s = e.reshape(s, cs);
    x0 = e.slice_last(x, 0, 1);
    x1 = e.slice_last(x, 1, 2);
  } else {
    x0 = e.slice_last(x, 0, d / 2);
    x1 = e.slice_last(x, d / 2, d);
  }
  ValueId o0 = e.op(Op::sub, {e.op(Op::mul, {x0, c}), e.op(Op::mul, {x1, s})});
  ValueId o1 = e.op(Op::add, {e.op(Op::mul, {x1, c}), e.op(Op::mul, {x0, s})});
  ValueId o = e.op(Op::concat, {o0, o1}, {{"axis", int64_t{-1}}});
  if (interleaved) o = e.reshape(o, x_shape);
  e.finish(o, e.type(in[0]).dtype, names[0]);
  return true;
}

// amax per group -> scale = max(amax, 1e-12) / fmax (f32) -> q = cast(clamp(x * (1 / scale))). Groups are whole
// rows (token), the whole tensor, or blocks that divide the trailing axes.
bool decompose_quantize(Emitter& e, const Node& node, const std::vector<ValueId>& in,
                        const std::vector<std::string>& names) {
  const Shape x_shape = e.shape(in[0]);
  const std::string granularity = node.attrs.get_string("granularity", "token");
  const std::string qtype = node.attrs.get_string("dtype", "f8e4m3");
  const double fmax = dtype_max_finite(*parse_dtype(qtype));
  const int64_t rank = static_cast<int64_t>(x_shape.size());
  // Grouped view of x: each group's elements on axes `reduce_axes` of `grouped`.
  Shape grouped = x_shape;
  std::vector<int64_t> reduce_axes;
  if (granularity == "tensor") {
    for (int64_t i = 0; i < rank; ++i) reduce_axes.push_back(i);
  } else if (granularity == "token") {
    if (rank == 0) return false;
    reduce_axes = {rank - 1};
  } else {
    const std::vector<int64_t> block = node.attrs.get_ints("block", {1, 128});
    const int64_t nb = static_cast<int64_t>(block.size());
    grouped.assign(x_shape.begin(), x_shape.end() - nb);
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t dim = x_shape[rank - nb + i];
      if (dim % block[i] != 0) return false;  // ragged blocks: keep the composite
      grouped.push_back(dim / block[i]);
      grouped.push_back(block[i]);
      reduce_axes.push_back(static_cast<int64_t>(grouped.size()) - 1);
    }
  }
  ValueId x = e.to_f32(in[0]);
  if (grouped != x_shape) x = e.reshape(x, grouped);
  ValueId amax = e.reduce(Op::reduce_amax, x, reduce_axes);
  ValueId scale = e.op(Op::div, {e.op(Op::max, {amax, e.scalar(1e-12)}), e.scalar(fmax)});
  // x times the scale's reciprocal, formed once per group, not x / scale per element: an IEEE division is some
  // ten instructions on a GPU (its reciprocal refined, a range check, a slow-path branch) in kernels that are
  // bound by instruction issue (the FP8 quantize groups). At most one ulp of x / scale apart before the cast.
  ValueId scaled = e.op(Op::mul, {x, e.op(Op::reciprocal, {scale})});
  ValueId clamped = e.op(Op::min, {e.op(Op::max, {scaled, e.scalar(-fmax)}), e.scalar(fmax)});
  ValueId q = e.op(Op::cast, {clamped}, {{"to", qtype}});
  if (grouped != x_shape) q = e.reshape(q, x_shape);
  e.op(Op::reshape, {q}, {{"shape", x_shape}}, names[0]);
  // The scale in the layout quantize promises (the consumer GEMM's layout).
  Shape scale_shape;
  if (granularity == "token") {
    scale_shape = x_shape;
    scale_shape.back() = 1;
  } else if (granularity == "block") {
    const int64_t nb = static_cast<int64_t>(node.attrs.get_ints("block", {1, 128}).size());
    scale_shape.assign(x_shape.begin(), x_shape.end() - nb);
    for (int64_t i = 0; i < nb; ++i) scale_shape.push_back(grouped[rank - nb + 2 * i]);
  }
  if (node.attrs.get_string("scale_layout", "row_major") != "k_major") {
    e.op(Op::reshape, {scale}, {{"shape", scale_shape}}, names[1]);
    return true;
  }
  // k-major scales (the GEMM's activation layout): the grid's last axis first, as a transpose, so that the
  // fused group writes the scales through its index map.
  const int64_t grid_rank = static_cast<int64_t>(scale_shape.size());
  std::vector<int64_t> perm = {grid_rank - 1};
  for (int64_t i = 0; i + 1 < grid_rank; ++i) perm.push_back(i);
  e.op(Op::transpose, {e.reshape(scale, scale_shape)}, {{"perm", perm}}, names[1]);
  return true;
}

// linear(x, w, b) -> linear(x, w) + b: the bias add becomes an elementwise op that fusion can fold into the
// next group (or that a GEMM epilogue takes back). A linear with the scale / residual epilogue keeps those
// (scale ⊙ x·wᵀ + residual, then + b: the same sum).
bool split_linear_bias(Emitter& e, const Node& node, const std::vector<ValueId>& in,
                       const std::vector<std::string>& names) {
  const size_t operands = node.op == Op::linear ? 2 : 4;  // linear(x, w) / scaled_linear(xq, xs, wq, ws)
  const int bias_at = node.op == Op::linear ? ops::linear_inputs(in.size(), node.attrs).bias
                                            : (in.size() > operands ? static_cast<int>(operands) : -1);
  if (bias_at < 0 || node.attrs.get_string("activation", "none") != "none") return false;
  std::vector<ValueId> kept = in;
  kept.erase(kept.begin() + bias_at);
  ValueId y = e.op(node.op, std::move(kept), node.attrs);
  ValueId bias = in[static_cast<size_t>(bias_at)];
  if (e.type(bias).dtype != e.type(y).dtype) {
    bias = e.op(Op::cast, {bias}, {{"to", std::string(dtype_name(e.type(y).dtype))}});
  }
  e.op(Op::add, {y, bias}, {}, names[0]);
  return true;
}

Rule rule_for(Op op) {
  switch (op) {
    case Op::layernorm:
    case Op::rmsnorm: return decompose_norm;
    case Op::softmax: return decompose_softmax;
    case Op::swiglu: return decompose_swiglu;
    case Op::rope: return decompose_rope;
    case Op::quantize: return decompose_quantize;
    case Op::linear:
    case Op::scaled_linear: return split_linear_bias;
    default: return nullptr;
  }
}

}  // namespace

PassResult decompose_composites(const Graph& graph) {
  PassReport report{"decompose", false, static_cast<int>(graph.nodes().size()), 0, {}, {}};
  GraphCopier copier(graph);
  std::map<std::string, int> counts;
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    const Node& node = graph.node(id);
    const Rule rule = rule_for(node.op);
    if (rule) {
      std::vector<ValueId> in;
      for (ValueId v : node.inputs) in.push_back(copier.map(v));
      std::vector<std::string> names;
      for (ValueId v : node.outputs) names.push_back(graph.value(v).name);
      Emitter emitter(copier.target(), names[0]);
      if (rule(emitter, node, in, names)) {
        for (ValueId v : node.outputs) copier.set_map(v, *copier.target().find_value(graph.value(v).name));
        ++counts[std::string(op_name(node.op)) +
                 (op_has_trait(node.op, kTraitMatmul) ? " bias split off" : "")];
        report.changed = true;
        continue;
      }
      report.notes.push_back("kept " + graph.node_label(id) + ": its shape does not decompose");
    }
    copier.copy_node(id);
  }
  for (const auto& [op, n] : counts) report.notes.push_back(fmt::format("decomposed {} x {}", n, op));
  report.found = counts;
  Graph out = copier.finish();
  report.nodes_after = static_cast<int>(out.nodes().size());
  return {std::move(out), std::move(report)};
}

}  // namespace kiln::passes
