#include "backend/plan.h"

#include <fmt/format.h>

#include <chrono>
#include <cstring>
#include <queue>
#include <set>

#include "kernel/emit.h"
#include "kernel/kernel_ir.h"
#include "passes/fuse_rows.h"

namespace kiln::backend {

bool is_library_op(Op op) {
  // pack_scales is a load-time layout change of weight scales: a host op on every backend.
  return op_has_trait(op, kTraitMatmul) || op_has_trait(op, kTraitAttention) || op == Op::gather ||
         op == Op::pack_scales;
}

Plan::~Plan() {
  for (DeviceTensor& t : owned_) backend_.release(t);
}

Result<std::unique_ptr<Plan>> Plan::build(Backend& backend, const Graph& graph, const PlanOptions& options) {
  std::unique_ptr<Plan> plan(new Plan(backend, graph));
  const Graph& g = plan->graph_;
  const auto node_count = static_cast<NodeId>(g.nodes().size());
  // Units: a fused group, or a node outside any group.
  std::map<int32_t, std::vector<NodeId>> groups;
  for (NodeId id = 0; id < node_count; ++id) {
    if (g.node(id).group >= 0) groups[g.node(id).group].push_back(id);
  }
  std::vector<int> unit_of(g.nodes().size());
  std::vector<std::vector<NodeId>> units;
  std::map<int32_t, int> unit_of_group;
  for (NodeId id = 0; id < node_count; ++id) {
    const int32_t grp = g.node(id).group;
    if (grp >= 0 && unit_of_group.count(grp)) {
      unit_of[id] = unit_of_group[grp];
      continue;
    }
    unit_of[id] = static_cast<int>(units.size());
    units.push_back(grp >= 0 ? groups[grp] : std::vector<NodeId>{id});
    if (grp >= 0) unit_of_group[grp] = unit_of[id];
  }
  // Topological order of units (fusion keeps the unit graph acyclic); ties go to the earliest node.
  std::vector<std::set<int>> succ(units.size());
  std::vector<int> indegree(units.size(), 0);
  for (NodeId id = 0; id < node_count; ++id) {
    for (ValueId v : g.node(id).inputs) {
      const NodeId p = g.value(v).producer;
      if (p < 0 || unit_of[p] == unit_of[id]) continue;
      if (succ[unit_of[p]].insert(unit_of[id]).second) ++indegree[unit_of[id]];
    }
  }
  std::priority_queue<std::pair<NodeId, int>, std::vector<std::pair<NodeId, int>>, std::greater<>> ready;
  for (size_t u = 0; u < units.size(); ++u) {
    if (indegree[u] == 0) ready.push({units[u][0], static_cast<int>(u)});
  }
  std::vector<int> order;
  while (!ready.empty()) {
    const int u = ready.top().second;
    ready.pop();
    order.push_back(u);
    for (int s : succ[u]) {
      if (--indegree[s] == 0) ready.push({units[s][0], s});
    }
  }
  if (order.size() != units.size()) {
    return make_error(ErrorCode::verify_error, "plan: the fused groups of graph " + g.name + " form a cycle");
  }

  auto allocate = [&](ValueId v) -> Status {
    if (plan->tensors_.count(v)) return ok_status();
    KILN_ASSIGN_OR_RETURN(DeviceTensor t, backend.allocate(g.value(v).type));
    plan->tensors_[v] = t;
    plan->owned_.push_back(t);
    return ok_status();
  };
  for (const GraphInput& in : g.inputs()) KILN_TRY(allocate(in.value));

  std::vector<kernel::Kernel> kernels;
  std::vector<kernel::KernelToEmit> to_emit;
  kernels.reserve(units.size());
  auto input_types = [&](const Node& n) {
    std::vector<TensorType> t;
    for (ValueId v : n.inputs) t.push_back(g.value(v).type);
    return t;
  };
  for (int u : order) {
    const std::vector<NodeId>& members = units[u];
    const Node& first = g.node(members[0]);
    Step step;
    step.nodes = members;
    step.label = members.size() > 1 ? fmt::format("group {} ({} nodes, first {})", first.group, members.size(),
                                                  g.node_label(members[0]))
                                    : g.node_label(members[0]);
    if (members.size() == 1 && op_has_trait(first.op, kTraitSource)) {
      // Constants: computed once, now. Groups that read them fold the value into their code too.
      Status st = backend.supports(first.op, input_types(first), first.attrs);
      if (!st.ok()) return with_context(st.error(), g.node_label(members[0]));
      for (ValueId v : first.outputs) KILN_TRY(allocate(v));
      std::vector<DeviceTensor> outs;
      for (ValueId v : first.outputs) outs.push_back(plan->tensors_[v]);
      KILN_TRY(backend.run_library(first.op, first.attrs, {}, outs));
      ++plan->summary_.constants;
      continue;
    }
    if (members.size() == 1 && is_library_op(first.op)) {
      Status st = backend.supports(first.op, input_types(first), first.attrs);
      if (!st.ok()) return with_context(st.error(), g.node_label(members[0]));
      step.kind = Step::Kind::library;
      step.inputs = first.inputs;
      step.outputs = first.outputs;
      for (ValueId v : first.outputs) KILN_TRY(allocate(v));
      plan->steps_.push_back(step);
      ++plan->summary_.library_calls;
      continue;
    }
    auto lowered = kernel::lower_nodes(g, members, fmt::format("k{}", kernels.size()));
    if (!lowered.ok()) {
      if (!options.reference_fallback) return with_context(lowered.error(), step.label);
      plan->summary_.notes.push_back(step.label + " runs on the reference: " + lowered.error().message);
      step.kind = Step::Kind::fallback;
      for (NodeId m : members) {
        for (ValueId v : g.node(m).outputs) KILN_TRY(allocate(v));
      }
      plan->steps_.push_back(step);
      ++plan->summary_.fallbacks;
      continue;
    }
    kernel::Kernel& k = kernels.emplace_back(std::move(lowered).value());
    const std::vector<int64_t> alias = kernel::alias_offsets(k);
    if (!alias.empty() && plan->tensors_.count(k.inputs[0].value)) {
      const DeviceTensor& base = plan->tensors_[k.inputs[0].value];
      for (size_t i = 0; i < k.outputs.size(); ++i) {
        const size_t es = dtype_size(k.outputs[i].type.dtype);
        plan->tensors_[k.outputs[i].value] =
            DeviceTensor{static_cast<std::byte*>(base.data) + alias[i] * static_cast<int64_t>(es), k.outputs[i].type};
      }
      ++plan->summary_.aliases;
      kernels.pop_back();
      continue;
    }
    step.kind = Step::Kind::kernel;
    step.kernel_index = static_cast<int>(to_emit.size());
    for (const kernel::KernelParam& p : k.inputs) step.inputs.push_back(p.value);
    for (const kernel::KernelParam& p : k.outputs) {
      step.outputs.push_back(p.value);
      KILN_TRY(allocate(p.value));
    }
    auto chosen = options.schedules.find(kernel::kernel_hash(k));
    const kernel::Schedule schedule = chosen != options.schedules.end()
                                          ? chosen->second
                                          : kernel::default_schedule(k, backend.target(), backend.device().compute_units);
    to_emit.push_back({&k, schedule, fmt::format("kiln_k{}", step.kernel_index)});
    plan->steps_.push_back(step);
    ++plan->summary_.kernels;
  }
  if (!to_emit.empty()) {
    KILN_ASSIGN_OR_RETURN(kernel::EmittedModule module, kernel::emit_module(to_emit, backend.target()));
    const auto start = std::chrono::steady_clock::now();
    KILN_ASSIGN_OR_RETURN(plan->module_, backend.compile(module));
    plan->summary_.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    plan->source_ = module.source;
  }
  for (const GraphOutput& o : g.outputs()) {
    if (!plan->tensors_.count(o.value)) {
      return make_error(ErrorCode::verify_error, "plan: output '" + o.name + "' is never computed");
    }
  }
  return plan;
}

Status Plan::set_inputs(const std::map<std::string, Tensor>& inputs) {
  for (const GraphInput& in : graph_.inputs()) {
    const Value& v = graph_.value(in.value);
    auto it = inputs.find(v.name);
    if (it == inputs.end()) {
      return make_error(ErrorCode::invalid_argument, "plan: graph input %" + v.name + " (" + type_to_string(v.type) +
                                                         ") is not given");
    }
    KILN_TRY(backend_.copy_to_device(it->second, tensors_.at(in.value)));
  }
  return ok_status();
}

Status Plan::run_fallback(const Step& step) {
  for (NodeId id : step.nodes) {
    const Node& n = graph_.node(id);
    std::vector<Tensor> inputs;
    for (ValueId v : n.inputs) {
      KILN_ASSIGN_OR_RETURN(Tensor t, backend_.copy_to_host(tensors_.at(v)));
      inputs.push_back(std::move(t));
    }
    std::vector<const Tensor*> ptrs;
    for (const Tensor& t : inputs) ptrs.push_back(&t);
    std::vector<Tensor> outputs;
    for (ValueId v : n.outputs) outputs.emplace_back(graph_.value(v).type.dtype, graph_.value(v).type.shape);
    Status st = op_def(n.op).reference(RefCall{ptrs, n.attrs, outputs});
    if (!st.ok()) return with_context(st.error(), graph_.node_label(id));
    for (size_t i = 0; i < n.outputs.size(); ++i) KILN_TRY(backend_.copy_to_device(outputs[i], tensors_.at(n.outputs[i])));
  }
  return ok_status();
}

Status Plan::execute() {
  for (const Step& step : steps_) {
    std::vector<DeviceTensor> in, out;
    for (ValueId v : step.inputs) in.push_back(tensors_.at(v));
    for (ValueId v : step.outputs) out.push_back(tensors_.at(v));
    Status st = ok_status();
    switch (step.kind) {
      case Step::Kind::kernel: st = backend_.launch(*module_, step.kernel_index, in, out); break;
      case Step::Kind::library: {
        const Node& n = graph_.node(step.nodes[0]);
        st = backend_.run_library(n.op, n.attrs, in, out);
        break;
      }
      case Step::Kind::fallback: st = run_fallback(step); break;
    }
    if (!st.ok()) return with_context(st.error(), step.label);
  }
  return backend_.synchronize();
}

Result<std::map<std::string, Tensor>> Plan::outputs() {
  std::map<std::string, Tensor> out;
  for (const GraphOutput& o : graph_.outputs()) {
    KILN_ASSIGN_OR_RETURN(Tensor t, backend_.copy_to_host(tensors_.at(o.value)));
    out[o.name] = std::move(t);
  }
  return out;
}

Result<std::map<std::string, Tensor>> Plan::run(const std::map<std::string, Tensor>& inputs) {
  KILN_TRY(set_inputs(inputs));
  KILN_TRY(execute());
  return outputs();
}

}  // namespace kiln::backend
