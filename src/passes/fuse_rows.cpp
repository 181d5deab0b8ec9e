#include "passes/fuse_rows.h"

#include <algorithm>
#include <map>
#include <set>

#include "fmt/format.h"

namespace kiln::passes {
namespace {

int independent_axes(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  const OpDef& def = op_def(n.op);
  if (!def.independent_axes) return -1;
  std::vector<TensorType> in, out;
  for (ValueId v : n.inputs) in.push_back(g.value(v).type);
  for (ValueId v : n.outputs) out.push_back(g.value(v).type);
  return def.independent_axes(OpCall{in, n.attrs}, out);
}

class RowFuser {
 public:
  RowFuser(const Graph& g, const FuseOptions& options)
      : g_(g), options_(options), group_(g.nodes().size(), -1), axes_(g.nodes().size(), -1),
        consumers_(g.values().size()) {
    for (NodeId id = 0; id < node_count(); ++id) {
      axes_[id] = independent_axes(g, id);
      for (ValueId v : g.node(id).inputs) consumers_[v].push_back(id);
    }
  }

  // Greedy, in topological order: each fusible node starts a group and absorbs its producers' groups when
  // the one rule allows it.
  void run() {
    for (NodeId id = 0; id < node_count(); ++id) {
      if (axes_[id] < 0) continue;
      const int32_t mine = new_group(id);
      std::vector<int32_t> producers;
      for (ValueId v : g_.node(id).inputs) {
        const NodeId p = g_.value(v).producer;
        if (p >= 0 && group_[p] >= 0 && group_[p] != mine &&
            std::find(producers.begin(), producers.end(), group_[p]) == producers.end()) {
          producers.push_back(group_[p]);
        }
      }
      for (int32_t other : producers) {
        if (members_[other].empty()) continue;  // merged away already
        const int32_t current = group_[id];
        if (can_fuse(current, other)) merge(other, current);
      }
    }
  }

  Graph annotated(PassReport& report) {
    Graph out = g_;
    std::map<int32_t, int32_t> dense;
    for (NodeId id = 0; id < node_count(); ++id) {
      const int32_t grp = group_[id];
      if (grp < 0) continue;
      auto [it, fresh] = dense.emplace(grp, static_cast<int32_t>(dense.size()));
      out.set_node_group(id, it->second);
    }
    int fused_nodes = 0, groups = 0;
    for (const auto& m : members_) {
      if (m.size() > 1) {
        ++groups;
        fused_nodes += static_cast<int>(m.size());
      }
    }
    report.changed = groups > 0;
    report.notes.push_back(fmt::format("{} groups of 2+ nodes hold {} nodes", groups, fused_nodes));
    return out;
  }

 private:
  NodeId node_count() const { return static_cast<NodeId>(g_.nodes().size()); }

  int32_t new_group(NodeId id) {
    const auto grp = static_cast<int32_t>(members_.size());
    members_.push_back({id});
    group_[id] = grp;
    return grp;
  }

  void merge(int32_t from, int32_t into) {
    for (NodeId n : members_[from]) group_[n] = into;
    members_[into].insert(members_[into].end(), members_[from].begin(), members_[from].end());
    std::sort(members_[into].begin(), members_[into].end());
    members_[from].clear();
  }

  bool can_fuse(int32_t a, int32_t b) const {
    std::vector<NodeId> all = members_[a];
    all.insert(all.end(), members_[b].begin(), members_[b].end());
    return rows_line_up(all) && !creates_cycle(a, b);
  }

  bool rows_line_up(const std::vector<NodeId>& members) const {
    std::set<NodeId> in_group(members.begin(), members.end());
    // L: the common leading prefix of all member outputs, capped by each member's independent axes.
    const Shape& first = g_.value(g_.node(members[0]).outputs[0]).type.shape;
    size_t prefix = first.size();
    for (NodeId m : members) {
      prefix = std::min(prefix, static_cast<size_t>(axes_[m]));
      for (ValueId v : g_.node(m).outputs) {
        const Shape& s = g_.value(v).type.shape;
        size_t k = 0;
        while (k < prefix && k < s.size() && s[k] == first[k]) ++k;
        prefix = k;
      }
    }
    int64_t rows = 1;
    for (size_t i = 0; i < prefix; ++i) rows *= first[i];
    for (NodeId m : members) {
      const Node& n = g_.node(m);
      const Shape& out = g_.value(n.outputs[0]).type.shape;
      for (ValueId v : n.outputs) {
        if (shape_numel(g_.value(v).type.shape) > rows * options_.max_row_elements) return false;
      }
      for (ValueId v : n.inputs) {
        const Shape& s = g_.value(v).type.shape;
        const NodeId p = g_.value(v).producer;
        const bool in_group_edge = p >= 0 && in_group.count(p);
        // Elementwise broadcasting aligns shapes on the right: a lower-rank input is broadcast along the
        // leading axes, so inside a group it would be one row feeding every row.
        if (in_group_edge && op_has_trait(n.op, kTraitElementwise) && s.size() != out.size() && prefix > 0) {
          return false;
        }
        // A row-aligned outside input (e.g. what a reduction reads) must fit a row too; broadcast inputs
        // (weights, cos/sin tables) are read through index maps and may be any size.
        if (!in_group_edge && !broadcasts_along_rows(s, out, prefix) &&
            shape_numel(s) > rows * options_.max_row_elements) {
          return false;
        }
      }
    }
    return true;
  }

  // An outside input broadcast to the output: it is read through an index map, so its size does not matter.
  static bool broadcasts_along_rows(const Shape& input, const Shape& output, size_t prefix) {
    if (input.size() != output.size()) return true;
    for (size_t i = 0; i < prefix; ++i) {
      if (input[i] != output[i]) return true;
    }
    return false;
  }

  // A path from one group to the other through a node outside both would become a cycle once merged.
  bool creates_cycle(int32_t a, int32_t b) const {
    return path_leaves_and_returns(a, b) || path_leaves_and_returns(b, a);
  }

  bool path_leaves_and_returns(int32_t from, int32_t to) const {
    std::vector<NodeId> stack;
    std::vector<bool> seen(g_.nodes().size(), false);
    auto push_consumers = [&](NodeId n, bool from_outside) {
      for (ValueId v : g_.node(n).outputs) {
        for (NodeId c : consumers_[v]) {
          if (seen[c]) continue;
          if (group_[c] == to) {
            if (from_outside) return true;
            continue;
          }
          if (group_[c] == from) continue;
          seen[c] = true;
          stack.push_back(c);
        }
      }
      return false;
    };
    for (NodeId m : members_[from]) {
      if (push_consumers(m, false)) return true;
    }
    while (!stack.empty()) {
      const NodeId n = stack.back();
      stack.pop_back();
      if (push_consumers(n, true)) return true;
    }
    return false;
  }

  const Graph& g_;
  FuseOptions options_;
  std::vector<int32_t> group_;
  std::vector<int> axes_;
  std::vector<std::vector<NodeId>> consumers_;
  std::vector<std::vector<NodeId>> members_;
};

}  // namespace

PassResult fuse_row_groups(const Graph& graph, const FuseOptions& options) {
  PassReport report{"fuse-rows", false, static_cast<int>(graph.nodes().size()),
                    static_cast<int>(graph.nodes().size()), {}};
  RowFuser fuser(graph, options);
  fuser.run();
  Graph out = fuser.annotated(report);
  return {std::move(out), std::move(report)};
}

std::vector<FusedGroup> collect_fused_groups(const Graph& graph) {
  std::map<int32_t, FusedGroup> groups;
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    const int32_t grp = graph.node(id).group;
    if (grp < 0) continue;
    FusedGroup& fg = groups[grp];
    fg.id = grp;
    fg.members.push_back(id);
  }
  std::vector<std::vector<NodeId>> consumers(graph.values().size());
  for (NodeId id = 0; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    for (ValueId v : graph.node(id).inputs) consumers[v].push_back(id);
  }
  std::set<ValueId> graph_outputs;
  for (const GraphOutput& o : graph.outputs()) graph_outputs.insert(o.value);
  std::vector<FusedGroup> out;
  for (auto& [grp, fg] : groups) {
    std::set<ValueId> read;
    for (NodeId m : fg.members) {
      for (ValueId v : graph.node(m).inputs) {
        const NodeId p = graph.value(v).producer;
        if ((p < 0 || graph.node(p).group != grp) && read.insert(v).second) {
          fg.inputs.push_back(v);
          fg.bytes += static_cast<double>(type_bytes(graph.value(v).type));
        }
      }
      for (ValueId v : graph.node(m).outputs) {
        bool escapes = graph_outputs.count(v) > 0;
        for (NodeId c : consumers[v]) escapes = escapes || graph.node(c).group != grp;
        if (escapes) {
          fg.outputs.push_back(v);
          fg.bytes += static_cast<double>(type_bytes(graph.value(v).type));
        }
      }
    }
    out.push_back(std::move(fg));
  }
  return out;
}

}  // namespace kiln::passes
