// The importer's emitter: kiln ops on symbols. All-constant inputs fold through the op's reference
// implementation (so folding means exactly what the executor computes); otherwise constants are materialized
// (a `full` node for a single value broadcast, a weight input with the data otherwise) and a node is added,
// after which the normalizing matchers may replace its value.
#include <fmt/format.h>

#include "onnx/importer.h"
#include "ref/executor.h"

namespace kiln::onnx {

Result<TensorType> Importer::type_of(const Sym& s) const {
  switch (s.kind) {
    case Sym::Kind::constant: return TensorType{s.tensor->dtype(), s.tensor->shape()};
    case Sym::Kind::value: return graph.value(s.value).type;
    case Sym::Kind::erf: return make_error(ErrorCode::unsupported, "Erf is supported only as part of a GELU");
    case Sym::Kind::absent: break;
  }
  return make_error(ErrorCode::invalid_argument, "a required input is missing");
}

Sym Importer::scalar(double value, DType dtype) {
  Tensor t(dtype, {});
  t.set(0, value);
  return Sym::constant(std::move(t));
}

Result<ValueId> Importer::materialize(const Sym& s) {
  if (s.is_value()) return s.value;
  if (!s.is_constant()) KILN_TRY(type_of(s));  // the error for absent and deferred symbols
  auto it = materialized_.find(s.tensor.get());
  if (it != materialized_.end()) return it->second.second;
  const Tensor& t = *s.tensor;
  bool uniform = t.numel() > 0;
  for (int64_t i = 1; uniform && i < t.numel(); ++i) uniform = t.get(i) == t.get(0) || (t.get(i) != t.get(i) && t.get(0) != t.get(0));
  ValueId v;
  if (uniform && (s.initializer ? t.numel() == 1 : t.numel() <= 64)) {  // small splats; an initializer [D] stays a weight
    const std::string key = type_to_string({t.dtype(), t.shape()}) + fmt::format("={}", t.get(0));
    if (auto hit = splats_.find(key); hit != splats_.end()) return hit->second;
    Attrs attrs{{"shape", t.shape()}, {"value", t.get(0)}, {"dtype", std::string(dtype_name(t.dtype()))}};
    KILN_ASSIGN_OR_RETURN(std::vector<ValueId> out, graph.add_node(Op::full, {}, attrs, {graph.unique_name(stem_ + "/const")}));
    v = out[0];
    splats_[key] = v;
  } else {
    const std::string name = graph.unique_name(sanitize_name(s.name.empty() ? stem_ + "/const" : s.name));
    KILN_ASSIGN_OR_RETURN(v, graph.add_input(name, TensorType{t.dtype(), t.shape()}, Binding::weight));
    weights.emplace(name, t);
  }
  materialized_[s.tensor.get()] = {s.tensor, v};
  return v;
}

const Tensor* Importer::weight_data(ValueId v) const {
  if (!graph.is_graph_input(v)) return nullptr;
  auto it = weights.find(graph.value(v).name);
  return it == weights.end() ? nullptr : &it->second;
}

std::optional<double> Importer::scalar_value(ValueId v) const {
  if (const Tensor* t = weight_data(v)) {
    if (t->numel() == 1) return t->get(0);
    return std::nullopt;
  }
  const Node* n = producer(v);
  if (n && n->op == Op::full && shape_numel(graph.value(v).type.shape) == 1) return n->attrs.get_float("value", 0.0);
  return std::nullopt;
}

bool Importer::try_charge_fold(int64_t numel) {
  const int64_t cap = fold_cap();
  if (numel > cap || folded_total_ > 16 * cap - numel) return false;
  folded_total_ += numel;
  return true;
}

Status Importer::charge_fold(const Shape& shape) {
  if (!try_charge_fold(shape_numel(shape))) {
    return make_error(ErrorCode::unsupported, fmt::format("folding would build a constant {} beyond the folding budget "
                                                          "({} elements per tensor, ImportOptions::max_fold_elements)",
                                                          shape_to_string(shape), fold_cap()));
  }
  return ok_status();
}

Result<ValueId> Importer::add_node1(Op op, std::vector<ValueId> inputs, Attrs attrs) {
  KILN_ASSIGN_OR_RETURN(std::vector<ValueId> out,
                        graph.add_node(op, std::move(inputs), std::move(attrs), {graph.unique_name(stem_)}));
  if (out.size() != 1) return make_error(ErrorCode::unsupported, "expected one output");
  return out[0];
}

Result<std::vector<Sym>> Importer::emit(Op op, const std::vector<Sym>& inputs, Attrs attrs) {
  bool all_constant = true;
  std::vector<TensorType> types;
  for (const Sym& s : inputs) {
    KILN_ASSIGN_OR_RETURN(TensorType t, type_of(s));
    types.push_back(t);
    all_constant = all_constant && s.is_constant();
  }
  if (all_constant) {
    KILN_ASSIGN_OR_RETURN(std::vector<TensorType> out_types, infer_node(op, types, attrs));
    const OpCost cost = op_def(op).cost(OpCall{types, attrs}, out_types);
    int64_t elements = 0;
    for (const TensorType& t : out_types) elements += shape_numel(t.shape);
    // Too big or too much work to fold: the node stays (staging computes weight-only nodes at load time).
    all_constant = cost.flops <= 1e3 * static_cast<double>(fold_cap()) && try_charge_fold(elements);
  }
  if (all_constant) {
    std::vector<Tensor> tensors;
    for (const Sym& s : inputs) tensors.push_back(*s.tensor);
    KILN_ASSIGN_OR_RETURN(std::vector<Tensor> out, ref::run_op(op, tensors, attrs));
    std::vector<Sym> syms;
    for (Tensor& t : out) syms.push_back(Sym::constant(std::move(t)));
    return syms;
  }
  std::vector<ValueId> ids;
  for (const Sym& s : inputs) {
    KILN_ASSIGN_OR_RETURN(ValueId v, materialize(s));
    ids.push_back(v);
  }
  std::vector<std::string> names;
  const int outputs = op == Op::split ? static_cast<int>(attrs.get_ints("sizes").size()) : 1;
  for (int i = 0; i < outputs; ++i) names.push_back(graph.unique_name(stem_));
  // unique_name looks only at existing values: make the names distinct among themselves too.
  for (int i = 1; i < outputs; ++i) names[static_cast<size_t>(i)] = graph.unique_name(names[0] + "." + std::to_string(i));
  KILN_ASSIGN_OR_RETURN(std::vector<ValueId> out, graph.add_node(op, ids, std::move(attrs), names));
  std::vector<Sym> syms;
  for (ValueId v : out) {
    ValueId result = v;
    if (options_.normalize && depth_ == 0 && out.size() == 1) {
      ++depth_;
      if (auto better = normalize(v)) result = *better;
      --depth_;
    }
    syms.push_back(Sym::of(result));
  }
  return syms;
}

Result<Sym> Importer::emit1(Op op, const std::vector<Sym>& inputs, Attrs attrs) {
  KILN_ASSIGN_OR_RETURN(std::vector<Sym> out, emit(op, inputs, std::move(attrs)));
  if (out.size() != 1) return make_error(ErrorCode::unsupported, "expected one output");
  return out[0];
}

}  // namespace kiln::onnx
