// models::Builder and the model pieces shared by the zoo (timestep embedding, rotary tables, head reshapes).
#include "models/builder.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace kiln::models {
namespace {

// A node the builder cannot add means the model code is wrong: say why and stop.
template <class T>
T must(Result<T> result, const std::string& what) {
  if (!result.ok()) {
    std::fprintf(stderr, "kiln: internal error in a model builder (%s): %s: %s\n", what.c_str(),
                 error_code_name(result.error().code), result.error().message.c_str());
    std::abort();
  }
  return std::move(result).value();
}

}  // namespace

const char* fp8_scaling_name(Fp8Scaling scaling) {
  switch (scaling) {
    case Fp8Scaling::tensor: return "tensor";
    case Fp8Scaling::channel: return "channel";
    case Fp8Scaling::block: return "block";
  }
  return "?";
}

Builder::Builder(std::string graph_name, DType act, GemmPrecision gemm) : act_(act), gemm_(gemm) {
  graph_.name = std::move(graph_name);
}

Graph Builder::finish() { return std::move(graph_); }

Builder::Scope::~Scope() { builder_->scope_.resize(depth_); }

Builder::Scope Builder::scope(const std::string& name) {
  const size_t depth = scope_.size();
  scope_.push_back(name);
  return Scope(this, depth);
}

std::string Builder::scoped(const std::string& leaf) const {
  std::string out;
  for (const std::string& s : scope_) out += s + ".";
  return out + leaf;
}

std::string Builder::activation_name(const std::string& stem) const {
  std::string prefix;
  for (size_t i = 0; i < scope_.size(); ++i) prefix += (i ? "." : "") + scope_[i];
  return graph_.unique_name(prefix.empty() ? stem : prefix + "/" + stem);
}

ValueId Builder::input(const std::string& name, DType dtype, Shape shape, Binding binding) {
  return must(graph_.add_input(name, TensorType{dtype, std::move(shape)}, binding), "input " + name);
}

ValueId Builder::weight(const std::string& leaf, Shape shape, std::optional<DType> dtype) {
  const std::string name = scoped(leaf);
  return must(graph_.add_input(name, TensorType{dtype.value_or(act_), std::move(shape)}, Binding::weight),
              "weight " + name);
}

void Builder::output(const std::string& name, ValueId value) {
  must(graph_.add_output(name, value), "output " + name);
}

std::vector<ValueId> Builder::nodes(Op op, std::vector<ValueId> inputs, Attrs attrs, const std::string& stem) {
  const std::string base = activation_name(stem.empty() ? std::string(op_name(op)) : stem);
  // Multi-output ops get "<base>", "<base>.1", ...: ask the op for its output count first.
  std::vector<TensorType> types;
  for (ValueId v : inputs) types.push_back(type(v));
  const auto inferred = infer_node(op, types, attrs);
  std::vector<std::string> names;
  if (inferred.ok()) {
    for (size_t i = 0; i < inferred->size(); ++i) names.push_back(i == 0 ? base : base + "." + std::to_string(i));
  }
  return must(graph_.add_node(op, std::move(inputs), std::move(attrs), std::move(names)), base);
}

ValueId Builder::node(Op op, std::vector<ValueId> inputs, Attrs attrs, const std::string& stem) {
  std::vector<ValueId> outs = nodes(op, std::move(inputs), std::move(attrs), stem);
  KILN_CHECK(outs.size() == 1);
  return outs[0];
}

ValueId Builder::cast(ValueId x, DType dtype) {
  if (this->dtype(x) == dtype) return x;
  return node(Op::cast, {x}, {{"to", std::string(dtype_name(dtype))}});
}

ValueId Builder::scalar(double value, DType dtype) {
  const auto key = std::make_pair(value, dtype);
  auto it = scalars_.find(key);
  if (it != scalars_.end()) return it->second;
  const ValueId v = must(graph_.add_node(Op::full, {},
                                         {{"shape", std::vector<int64_t>{}},
                                          {"value", value},
                                          {"dtype", std::string(dtype_name(dtype))}},
                                         {graph_.unique_name("const")}),
                         "scalar")[0];
  scalars_[key] = v;
  return v;
}

ValueId Builder::arange(int64_t size, double start, double step, DType dtype) {
  return node(Op::arange, {},
              {{"size", size}, {"start", start}, {"step", step}, {"dtype", std::string(dtype_name(dtype))}});
}

ValueId Builder::reshape(ValueId x, Shape shape) {
  if (this->shape(x) == shape) return x;
  return node(Op::reshape, {x}, {{"shape", std::move(shape)}});
}

ValueId Builder::transpose(ValueId x, std::vector<int64_t> perm) {
  return node(Op::transpose, {x}, {{"perm", std::move(perm)}});
}

ValueId Builder::concat(std::vector<ValueId> xs, int64_t axis) {
  if (xs.size() == 1) return xs[0];
  return node(Op::concat, std::move(xs), {{"axis", axis}});
}

std::vector<ValueId> Builder::split(ValueId x, int64_t axis, std::vector<int64_t> sizes) {
  return nodes(Op::split, {x}, {{"axis", axis}, {"sizes", std::move(sizes)}});
}

std::vector<ValueId> Builder::chunk(ValueId x, int64_t axis, int64_t parts) {
  const Shape& s = shape(x);
  const int64_t a = axis < 0 ? axis + static_cast<int64_t>(s.size()) : axis;
  KILN_CHECK(a >= 0 && a < static_cast<int64_t>(s.size()) && s[a] % parts == 0);
  return split(x, axis, std::vector<int64_t>(static_cast<size_t>(parts), s[a] / parts));
}

ValueId Builder::slice(ValueId x, int64_t axis, int64_t start, int64_t end) {
  return node(Op::slice, {x}, {{"axis", axis}, {"start", start}, {"end", end}, {"step", int64_t{1}}});
}

ValueId Builder::gather(ValueId data, ValueId indices, int64_t axis) {
  return node(Op::gather, {data, indices}, {{"axis", axis}});
}

ValueId Builder::linear(ValueId x, const std::string& name, int64_t in, int64_t out, bool bias) {
  auto s = scope(name);
  KILN_CHECK(shape(x).back() == in);
  const ValueId b = bias ? weight("bias", {out}) : -1;
  if (!(gemm_.fp8 && fp8_region_)) {
    std::vector<ValueId> args = {x, weight("weight", {out, in})};
    if (bias) args.push_back(b);
    return node(Op::linear, std::move(args));
  }
  std::string granularity = "token";
  Shape ws_shape = {out, 1};
  if (gemm_.scaling == Fp8Scaling::tensor) {
    granularity = "tensor";
    ws_shape = {};
  } else if (gemm_.scaling == Fp8Scaling::block) {
    granularity = "block";
    ws_shape = {(out + 127) / 128, (in + 127) / 128};
  }
  const ValueId wq = weight("weight", {out, in}, DType::f8e4m3);
  const ValueId ws = weight("weight_scale", ws_shape, DType::f32);
  Attrs quantize_attrs = {{"dtype", std::string("f8e4m3")}, {"granularity", granularity}};
  if (gemm_.scaling == Fp8Scaling::block) {
    // 1x128 activation blocks, scales k-block-major: the layout scaled_linear (and cuBLASLt) reads.
    quantize_attrs.set("block", std::vector<int64_t>{1, 128});
    quantize_attrs.set("scale_layout", std::string("k_major"));
  }
  const std::vector<ValueId> q = nodes(Op::quantize, {x}, std::move(quantize_attrs), "quantize");
  KILN_CHECK(q.size() == 2);
  std::vector<ValueId> args = {q[0], q[1], wq, ws};
  if (bias) args.push_back(b);
  return node(Op::scaled_linear, std::move(args), {{"out_dtype", std::string(dtype_name(act_))}}, "linear");
}

ValueId Builder::layer_norm(ValueId x, double eps) { return node(Op::layernorm, {x}, {{"eps", eps}}); }

ValueId Builder::rms_norm(ValueId x, const std::string& weight_name, int64_t dim, double eps) {
  return node(Op::rmsnorm, {x, weight(weight_name, {dim})}, {{"eps", eps}});
}

ValueId Builder::rope(ValueId x, ValueId cos, ValueId sin, const std::string& style) {
  return node(Op::rope, {x, cos, sin}, {{"style", style}});
}

ValueId Builder::attention(ValueId q, ValueId k, ValueId v, bool causal) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(shape(q).back()));
  return node(Op::attention, {q, k, v}, {{"causal", int64_t{causal ? 1 : 0}}, {"scale", scale}});
}

// ---- shared pieces ----

ValueId timestep_embedding(Builder& b, ValueId t, int64_t dim, double time_factor, double max_period) {
  KILN_CHECK(b.shape(t).size() == 1 && dim % 2 == 0);
  const int64_t batch = b.shape(t)[0];
  const int64_t half = dim / 2;
  auto s = b.scope("time_proj");
  // freqs [half] = exp(-ln(max_period) * i / half)
  const ValueId freqs = b.exp(b.arange(half, 0.0, -std::log(max_period) / static_cast<double>(half)));
  const ValueId scaled = b.mul_scalar(b.reshape(b.cast(t, DType::f32), {batch, 1}), time_factor);
  const ValueId args = b.mul(scaled, b.reshape(freqs, {1, half}));  // [B, half]
  return b.concat({b.cos(args), b.sin(args)}, -1);
}

std::pair<ValueId, ValueId> rope_tables(Builder& b, ValueId ids, const std::vector<int64_t>& axes_dim,
                                        double theta) {
  const Shape& ids_shape = b.shape(ids);
  KILN_CHECK(ids_shape.size() == 2 && ids_shape[1] == static_cast<int64_t>(axes_dim.size()));
  auto s = b.scope("rope");
  std::vector<ValueId> angles;
  for (size_t i = 0; i < axes_dim.size(); ++i) {
    const int64_t d = axes_dim[i];
    KILN_CHECK(d % 2 == 0);
    // omega [d/2] = theta^(-2j/d) = exp(j * (-2 ln(theta) / d))
    const ValueId omega = b.exp(b.arange(d / 2, 0.0, -2.0 * std::log(theta) / static_cast<double>(d)));
    const ValueId pos = b.slice(ids, 1, static_cast<int64_t>(i), static_cast<int64_t>(i) + 1);  // [S, 1]
    angles.push_back(b.mul(pos, b.reshape(omega, {1, d / 2})));                               // [S, d/2]
  }
  const ValueId all = b.concat(angles, 1);  // [S, sum(d_i)/2]
  return {b.cos(all), b.sin(all)};
}

ValueId split_heads(Builder& b, ValueId x, int64_t heads, int64_t head_dim) {
  const Shape& s = b.shape(x);
  KILN_CHECK(s.size() == 3 && s[2] == heads * head_dim);
  return b.transpose(b.reshape(x, {s[0], s[1], heads, head_dim}), {0, 2, 1, 3});
}

ValueId merge_heads(Builder& b, ValueId x) {
  const Shape s = b.shape(x);
  KILN_CHECK(s.size() == 4);
  return b.reshape(b.transpose(x, {0, 2, 1, 3}), {s[0], s[2], s[1] * s[3]});
}

}  // namespace kiln::models
