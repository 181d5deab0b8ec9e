#include "passes/rematerialize.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "passes/graph_copier.h"
#include "passes/staging.h"
#include "passes/value_readers.h"

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

// A member a reading group may recompute: an elementwise op (no view) with one output of `shape`.
bool recomputable(const Graph& g, const Node& n, const Shape& shape) {
  return op_has_trait(n.op, kTraitElementwise) && !op_has_trait(n.op, kTraitView) && n.outputs.size() == 1 &&
         g.value(n.outputs[0]).type.shape == shape;
}

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
    if (!recomputable(g, n, shape)) return {};
    if (!members.insert(p).second) continue;
    if (static_cast<int>(members.size()) > kRematerializeMaxNodes) return {};
    for (ValueId in : n.inputs) todo.push_back(in);
  }
  return {{members.begin(), members.end()}, std::move(inputs)};
}

// Where v's whole cone does not qualify or saves nothing: v as a chain of one-input elementwise members of v's
// shape over a member value u of A with fewer bytes than v (a modulated layernorm's f32 cast of its bf16
// output: the layernorm's rows need its reduction, the cast does not). B recomputes the chain from u, which A
// writes instead of v; u is A's own value, so the rewrite stays exact. Empty when there is no such u.
Cone narrower_member_cone(const Graph& g, ValueId v) {
  const int32_t group = g.node(g.value(v).producer).group;
  const TensorType& type = g.value(v).type;
  std::vector<NodeId> chain;
  for (ValueId at = v; static_cast<int>(chain.size()) < kRematerializeMaxNodes;) {
    const Node& n = g.node(g.value(at).producer);
    if (!recomputable(g, n, type.shape) || n.inputs.size() != 1) return {};
    chain.push_back(g.value(at).producer);
    const ValueId u = n.inputs[0];
    const NodeId p = g.value(u).producer;
    if (p < 0 || g.node(p).group != group || g.value(u).type.shape != type.shape) return {};
    if (tensor_bytes(g.value(u).type) < tensor_bytes(type)) return {{chain.rbegin(), chain.rend()}, {u}};
    at = u;
  }
  return {};
}

}  // namespace

PassResult rematerialize(const Graph& g) {
  PassReport report{"rematerialize", false, static_cast<int>(g.nodes().size()), 0, {}, {}};
  const ValueReaders readers(g);
  // Only within a stage: a value computed at load time (a weight's cast) or per step stays where it is, read.
  const std::vector<Binding> time = classify_binding_times(g);
  std::map<std::pair<ValueId, int32_t>, Cone> plan;  // (value, reading group) -> the cone that group recomputes
  for (const Node& n : g.nodes()) {
    if (n.group < 0) continue;
    for (ValueId v : n.outputs) {
      std::set<int32_t> groups;
      for (NodeId r : readers.of(v)) {
        const Node& reader = g.node(r);
        if (reader.group >= 0 && reader.group != n.group && !reader.outputs.empty() && time[reader.outputs[0]] == time[v]) {
          groups.insert(reader.group);
        }
      }
      if (groups.empty()) continue;
      const double v_bytes = tensor_bytes(g.value(v).type);
      auto bytes_of = [&](const Cone& c) {
        double b = 0;
        for (ValueId in : c.inputs) b += tensor_bytes(g.value(in).type);
        return b;
      };
      Cone cone = cone_of(g, v);
      if (cone.nodes.empty() || bytes_of(cone) >= v_bytes) cone = narrower_member_cone(g, v);
      if (cone.nodes.empty()) continue;
      const double in_bytes = bytes_of(cone);
      for (int32_t b : groups) {
        plan[{v, b}] = cone;
        const std::string more = cone.nodes.size() > 1 ? fmt::format(" (+{} elementwise)", cone.nodes.size() - 1) : "";
        ++report.found[fmt::format("{}{} recomputed by its reader's group", op_name(n.op), more)];
        report.notes.push_back(fmt::format("%{} of g{} recomputed in g{} from {:.1f} MB instead of read ({:.1f} MB)",
                                           g.value(v).name, n.group, b, in_bytes / 1e6, v_bytes / 1e6));
      }
    }
  }
  GraphCopier copier(g);
  std::map<std::pair<ValueId, int32_t>, ValueId> clone;  // (source value, group) -> that group's recomputed copy
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    const Node& n = g.node(id);
    // A reader in a group that recomputes some of its inputs reads the copies: each cone is written once in that
    // group, just before its first reader there.
    std::vector<std::pair<ValueId, ValueId>> read_copies;  // (source value, its shared mapping, restored after)
    for (ValueId v : n.inputs) {
      auto planned = n.group >= 0 ? plan.find({v, n.group}) : plan.end();
      const bool seen = std::any_of(read_copies.begin(), read_copies.end(), [&](const auto& r) { return r.first == v; });
      if (planned == plan.end() || seen) continue;
      if (!clone.count({v, n.group})) {
        std::map<ValueId, ValueId> local;  // cone values -> their copies
        for (NodeId c : planned->second.nodes) {
          const Node& m = g.node(c);
          std::vector<ValueId> in;
          for (ValueId u : m.inputs) in.push_back(local.count(u) ? local[u] : copier.map(u));
          const std::string name = copier.fresh_name(g.value(m.outputs[0]).name + ".g" + std::to_string(n.group));
          local[m.outputs[0]] = copier.add("rematerialize", m.op, std::move(in), m.attrs, {name})[0];
          copier.target().set_node_group(static_cast<NodeId>(copier.target().nodes().size()) - 1, n.group);
        }
        clone[{v, n.group}] = local.at(v);
      }
      read_copies.push_back({v, copier.map(v)});
      copier.set_map(v, clone.at({v, n.group}));
    }
    copier.copy_node(id);
    for (const auto& [v, shared] : read_copies) copier.set_map(v, shared);
  }
  Graph out = copier.finish();
  report.changed = !plan.empty();
  report.nodes_after = static_cast<int>(out.nodes().size());
  return {std::move(out), std::move(report)};
}

}  // namespace kiln::passes
