#include "passes/rematerialize.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "passes/staging.h"

namespace kiln::passes {
namespace {

double tensor_bytes(const TensorType& t) {
  return static_cast<double>(shape_numel(t.shape)) * static_cast<double>(dtype_size(t.dtype));
}

// The members of `group` that `v` is computed from, in graph order, and the values they read from outside it;
// empty when some member on the way is not an elementwise op of v's shape, or there are too many.
struct Cone {
  std::vector<NodeId> nodes;
  std::set<ValueId> inputs;
};

Cone cone_of(const Graph& g, ValueId v) {
  const int32_t group = g.node(g.value(v).producer).group;
  const Shape& shape = g.value(v).type.shape;
  std::set<NodeId> members;
  std::set<ValueId> inputs;
  std::vector<ValueId> todo = {v};
  while (!todo.empty()) {
    const ValueId at = todo.back();
    todo.pop_back();
    const NodeId p = g.value(at).producer;
    if (p < 0 || g.node(p).group != group) {
      inputs.insert(at);
      continue;
    }
    const Node& n = g.node(p);
    if (!op_has_trait(n.op, kTraitElementwise) || op_has_trait(n.op, kTraitView) || n.outputs.size() != 1 ||
        g.value(n.outputs[0]).type.shape != shape) {
      return {};
    }
    if (!members.insert(p).second) continue;
    if (static_cast<int>(members.size()) > kRematerializeMaxNodes) return {};
    for (ValueId in : n.inputs) todo.push_back(in);
  }
  return {{members.begin(), members.end()}, std::move(inputs)};
}

}  // namespace

PassResult rematerialize(const Graph& g) {
  PassReport report{"rematerialize", false, static_cast<int>(g.nodes().size()), 0, {}, {}};
  std::vector<std::vector<NodeId>> readers(g.values().size());
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    for (ValueId v : g.node(id).inputs) readers[v].push_back(id);
  }
  // Only within a stage: a value computed at load time (a weight's cast) or per step stays where it is, read.
  const std::vector<Binding> time = classify_binding_times(g);
  std::map<std::pair<ValueId, int32_t>, Cone> plan;  // (value, reading group) -> the cone that group recomputes
  for (const Node& n : g.nodes()) {
    if (n.group < 0) continue;
    for (ValueId v : n.outputs) {
      std::set<int32_t> groups;
      for (NodeId r : readers[v]) {
        const Node& reader = g.node(r);
        if (reader.group >= 0 && reader.group != n.group && !reader.outputs.empty() && time[reader.outputs[0]] == time[v]) {
          groups.insert(reader.group);
        }
      }
      if (groups.empty()) continue;
      Cone cone = cone_of(g, v);
      if (cone.nodes.empty()) continue;
      double in_bytes = 0;
      for (ValueId in : cone.inputs) in_bytes += tensor_bytes(g.value(in).type);
      const double v_bytes = tensor_bytes(g.value(v).type);
      if (in_bytes >= v_bytes) continue;
      for (int32_t b : groups) {
        plan[{v, b}] = cone;
        const std::string more = cone.nodes.size() > 1 ? fmt::format(" (+{} elementwise)", cone.nodes.size() - 1) : "";
        ++report.found[fmt::format("{}{} recomputed by its reader's group", op_name(n.op), more)];
        report.notes.push_back(fmt::format("%{} of g{} recomputed in g{} from {:.1f} MB instead of read ({:.1f} MB)",
                                           g.value(v).name, n.group, b, in_bytes / 1e6, v_bytes / 1e6));
      }
    }
  }
  Graph out;
  out.name = g.name;
  std::vector<ValueId> map(g.values().size(), -1);
  for (const GraphInput& in : g.inputs()) {
    const Value& v = g.value(in.value);
    map[in.value] = *out.add_input(v.name, v.type, in.binding);
  }
  std::set<std::string> source_names;  // a copy's name must not be one a source value takes later
  for (const Value& v : g.values()) source_names.insert(v.name);
  auto copy_name = [&](const std::string& stem) {
    std::string name = out.unique_name(stem);
    for (int i = 1; source_names.count(name); ++i) name = out.unique_name(stem + "." + std::to_string(i));
    return name;
  };
  std::map<std::pair<ValueId, int32_t>, ValueId> clone;  // (source value, group) -> that group's recomputed copy
  auto emit = [&](const Node& n, int32_t group, std::vector<ValueId> inputs, std::vector<std::string> names) {
    auto outs = out.add_node(n.op, std::move(inputs), n.attrs, std::move(names));
    KILN_CHECK(outs.ok());
    out.set_node_group(static_cast<NodeId>(out.nodes().size()) - 1, group);
    return *outs;
  };
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    const Node& n = g.node(id);
    std::vector<ValueId> inputs;
    for (ValueId v : n.inputs) {
      auto planned = n.group >= 0 ? plan.find({v, n.group}) : plan.end();
      if (planned != plan.end() && !clone.count({v, n.group})) {
        // The cone, once, in this group, just before its first reader here.
        std::map<ValueId, ValueId> local;  // cone values -> their copies
        for (NodeId c : planned->second.nodes) {
          const Node& m = g.node(c);
          std::vector<ValueId> in;
          for (ValueId u : m.inputs) in.push_back(local.count(u) ? local[u] : map[u]);
          const ValueId copy = emit(m, n.group, std::move(in),
                                    {copy_name(g.value(m.outputs[0]).name + ".g" + std::to_string(n.group))})[0];
          local[m.outputs[0]] = copy;
        }
        clone[{v, n.group}] = local.at(v);
      }
      auto cloned = n.group >= 0 ? clone.find({v, n.group}) : clone.end();
      inputs.push_back(cloned != clone.end() ? cloned->second : map[v]);
    }
    std::vector<std::string> names;
    for (ValueId v : n.outputs) names.push_back(g.value(v).name);
    const std::vector<ValueId> outs = emit(n, n.group, std::move(inputs), std::move(names));
    for (size_t i = 0; i < outs.size(); ++i) map[n.outputs[i]] = outs[i];
  }
  for (const GraphOutput& o : g.outputs()) KILN_CHECK(out.add_output(o.name, map[o.value]).ok());
  report.changed = !plan.empty();
  report.nodes_after = static_cast<int>(out.nodes().size());
  return {std::move(out), std::move(report)};
}

}  // namespace kiln::passes
