#include "passes/fuse_rows.h"

#include <algorithm>
#include <map>
#include <set>

#include "fmt/format.h"
#include "passes/staging.h"

namespace kiln::passes {
namespace {

class RowFuser {
 public:
  RowFuser(const Graph& g, const FuseOptions& options)
      : g_(g), options_(options), group_(g.nodes().size(), -1), axes_(g.nodes().size(), -1),
        consumers_(g.values().size()), binding_time_(classify_binding_times(g)) {
    for (const GraphOutput& o : g.outputs()) graph_outputs_.insert(o.value);
    for (NodeId id = 0; id < node_count(); ++id) {
      axes_[id] = node_independent_axes(g, id);
      for (ValueId v : g.node(id).inputs) consumers_[v].push_back(id);
    }
  }

  // Greedy merging of neighbouring groups, repeated to a fixed point. The first phase only grows groups that
  // hold a reduction (the anchors: a row is what one block reduces), so prologues and epilogues gather
  // around the reduction they feed; the second phase lets the remaining elementwise ops and views join any
  // neighbour the rule allows.
  void run() {
    for (NodeId id = 0; id < node_count(); ++id) {
      if (axes_[id] >= 0) new_group(id);
    }
    for (bool anchored : {true, false}) {
      bool changed = true;
      while (changed) {
        changed = false;
        for (NodeId id = 0; id < node_count(); ++id) {
          if (group_[id] < 0) continue;
          for (ValueId v : g_.node(id).inputs) {
            const NodeId p = g_.value(v).producer;
            if (p < 0 || group_[p] < 0 || group_[p] == group_[id]) continue;
            const int32_t mine = group_[id], theirs = group_[p];
            if (anchored && !has_row_structure(members_[mine]) && !has_row_structure(members_[theirs])) continue;
            if (can_fuse(mine, theirs)) {
              merge(theirs, mine);
              changed = true;
            }
          }
        }
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
        ++report.found[describe_group_pattern(g_, m)];
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
    std::sort(all.begin(), all.end());
    // One stage: load-time, per-step and per-call work never share a kernel.
    if (time_of(members_[a][0]) != time_of(members_[b][0])) return false;
    const int merged = row_axes(all);
    if (merged < 0) return false;
    // Rows may not coarsen: a merge that leaves fewer independent rows than a group with reductions had
    // trades parallelism for a saved round trip and is refused. Other groups adopt their partner's rows.
    for (int32_t grp : {a, b}) {
      if (has_row_structure(members_[grp]) && merged < row_axes(members_[grp])) return false;
    }
    return !creates_cycle(a, b);
  }

  // Reductions (and row ops) fix a group's rows: a row is what one thread block reduces. Elementwise ops and
  // views adapt to whatever rows their group has.
  bool has_row_structure(const std::vector<NodeId>& members) const {
    for (NodeId m : members) {
      if (op_has_trait(g_.node(m).op, kTraitReduction) || op_has_trait(g_.node(m).op, kTraitRowwise)) return true;
    }
    return false;
  }

  Binding time_of(NodeId id) const { return binding_time_[g_.node(id).outputs[0]]; }

  // Prologue members are elementwise ops and views whose values never leave the group and that read only
  // outside values or other prologue members: a kernel recomputes them per element while loading, through
  // whatever index map they form, so their rows need not line up. Everything else is a row member.
  std::vector<bool> prologue_members(const std::vector<NodeId>& members) const {
    std::set<NodeId> in_group(members.begin(), members.end());
    std::vector<bool> prologue(members.size(), false);
    std::map<NodeId, bool> is_prologue;
    for (size_t i = 0; i < members.size(); ++i) {  // members are in topological order
      const Node& n = g_.node(members[i]);
      bool ok = op_has_trait(n.op, kTraitElementwise) || op_has_trait(n.op, kTraitView);
      for (ValueId v : n.inputs) {
        const NodeId p = g_.value(v).producer;
        if (p >= 0 && in_group.count(p) && !is_prologue[p]) ok = false;
      }
      for (ValueId v : n.outputs) {
        if (graph_outputs_.count(v)) ok = false;
        for (NodeId c : consumers_[v]) {
          ok = ok && in_group.count(c);
          // Recomputing per element is free only for cheap math: a transcendental value that a consumer
          // reads broadcast (a cos/sin table shared by every head) would be recomputed many times over.
          if (op_has_trait(n.op, kTraitTranscendental) &&
              g_.value(v).type.shape != g_.value(g_.node(c).outputs[0]).type.shape) {
            ok = false;
          }
        }
      }
      prologue[i] = ok;
      is_prologue[members[i]] = ok;
    }
    return prologue;
  }

  // The number L of leading axes along which the members' rows line up, or -1 when they do not. L is the
  // common leading prefix of the row members' outputs, capped by each one's independent axes; every row
  // (input and output) must hold at most max_row_elements.
  int row_axes(const std::vector<NodeId>& members) const {
    const std::vector<bool> prologue = prologue_members(members);
    std::vector<NodeId> rows_of;
    for (size_t i = 0; i < members.size(); ++i) {
      if (!prologue[i]) rows_of.push_back(members[i]);
    }
    if (rows_of.empty()) rows_of.push_back(members.back());  // a pure prologue writes nothing; keep a shape
    const Shape& first = g_.value(g_.node(rows_of[0]).outputs[0]).type.shape;
    size_t prefix = first.size();
    for (NodeId m : rows_of) {
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
    std::set<NodeId> row_set(rows_of.begin(), rows_of.end());
    for (NodeId m : rows_of) {
      const Node& n = g_.node(m);
      const Shape& out = g_.value(n.outputs[0]).type.shape;
      for (ValueId v : n.outputs) {
        if (shape_numel(g_.value(v).type.shape) > rows * options_.max_row_elements) return -1;
      }
      for (ValueId v : n.inputs) {
        const Shape& s = g_.value(v).type.shape;
        const NodeId p = g_.value(v).producer;
        const bool row_edge = p >= 0 && row_set.count(p);
        // Elementwise broadcasting aligns shapes on the right: a lower-rank in-group input is broadcast
        // along the leading axes, so it would be one row feeding every row.
        if (row_edge && op_has_trait(n.op, kTraitElementwise) && s.size() != out.size() && prefix > 0) return -1;
        // A row-aligned input read from outside (or through a prologue) must fit a row too; broadcast inputs
        // (weights, cos/sin tables, modulation vectors) are read through index maps and may be any size.
        if (!row_edge && !broadcasts_along_rows(s, out, prefix) &&
            shape_numel(s) > rows * options_.max_row_elements) {
          return -1;
        }
      }
    }
    return static_cast<int>(prefix);
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
  std::vector<Binding> binding_time_;
  std::set<ValueId> graph_outputs_;
};

}  // namespace

PassResult fuse_row_groups(const Graph& graph, const FuseOptions& options) {
  PassReport report{"fuse-rows", false, static_cast<int>(graph.nodes().size()),
                    static_cast<int>(graph.nodes().size()), {}, {}};
  RowFuser fuser(graph, options);
  fuser.run();
  Graph out = fuser.annotated(report);
  return {std::move(out), std::move(report)};
}

std::string describe_group_pattern(const Graph& graph, const std::vector<NodeId>& members) {
  if (members.empty()) return "empty";
  std::vector<std::pair<std::string, int>> shaping;  // token, run length
  int elementwise = 0, views = 0;
  for (NodeId m : members) {
    const Node& n = graph.node(m);
    std::string token;
    const bool to_fp8 = n.op == Op::cast && (graph.value(n.outputs[0]).type.dtype == DType::f8e4m3 ||
                                            graph.value(n.outputs[0]).type.dtype == DType::f8e5m2);
    if (op_has_trait(n.op, kTraitReduction) || op_has_trait(n.op, kTraitTranscendental) ||
        op_has_trait(n.op, kTraitRowwise) || op_has_trait(n.op, kTraitQuantize)) {
      token = std::string(op_name(n.op));
    } else if (to_fp8) {
      token = "cast " + std::string(dtype_name(graph.value(n.outputs[0]).type.dtype));
    } else if (op_has_trait(n.op, kTraitView)) {
      ++views;
    } else {
      ++elementwise;
    }
    if (token.empty()) continue;
    if (!shaping.empty() && shaping.back().first == token) {
      ++shaping.back().second;
    } else {
      shaping.emplace_back(token, 1);
    }
  }
  std::string out;
  for (const auto& [token, run] : shaping) {
    out += (out.empty() ? "" : " -> ") + token + (run > 1 ? " x" + std::to_string(run) : "");
  }
  if (out.empty() && elementwise == 0) return fmt::format("views only ({})", views);
  if (out.empty()) {
    out = fmt::format("elementwise x{}", elementwise);
    elementwise = 0;
  }
  std::string rest;
  if (elementwise > 0) rest += fmt::format("+{} elementwise", elementwise);
  if (views > 0) rest += fmt::format("{}{} view{}", rest.empty() ? "+" : ", ", views, views == 1 ? "" : "s");
  // Values leaving the group: read by a node outside it or a graph output.
  const std::set<NodeId> in_group(members.begin(), members.end());
  std::set<ValueId> outputs;
  for (const GraphOutput& o : graph.outputs()) outputs.insert(o.value);
  std::set<ValueId> produced, escaping;
  for (NodeId m : members) {
    for (ValueId v : graph.node(m).outputs) {
      produced.insert(v);
      if (outputs.count(v)) escaping.insert(v);
    }
  }
  for (NodeId id = *std::min_element(members.begin(), members.end()) + 1; id < static_cast<NodeId>(graph.nodes().size()); ++id) {
    if (in_group.count(id)) continue;
    for (ValueId in : graph.node(id).inputs) {
      if (produced.count(in)) escaping.insert(in);
    }
  }
  const int writes = static_cast<int>(escaping.size());
  rest += fmt::format("{}writes {}", rest.empty() ? "" : "; ", writes);
  return out + " (" + rest + ")";
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
  // A group reads an outside value whole, unless only its slices and splits (index maps) read it: then it
  // reads the parts they select.
  auto is_part_view = [&](NodeId m) { return graph.node(m).op == Op::slice || graph.node(m).op == Op::split; };
  for (auto& [grp, fg] : groups) {
    std::set<ValueId> read;
    std::map<ValueId, double> part_bytes;  // outside value -> bytes its in-group slices/splits select, or -1
    for (NodeId m : fg.members) {
      for (ValueId v : graph.node(m).inputs) {
        const NodeId p = graph.value(v).producer;
        if (p >= 0 && graph.node(p).group == grp) continue;
        if (read.insert(v).second) fg.inputs.push_back(v);
        double& part = part_bytes[v];
        if (part < 0) continue;
        if (!is_part_view(m)) {
          part = -1;
          continue;
        }
        for (ValueId o : graph.node(m).outputs) {
          bool used = graph_outputs.count(o) > 0;
          for (NodeId c : consumers[o]) used = used || graph.node(c).group == grp;
          if (used) part += static_cast<double>(type_bytes(graph.value(o).type));
        }
      }
    }
    for (ValueId v : fg.inputs) {
      const double whole = static_cast<double>(type_bytes(graph.value(v).type));
      const double part = part_bytes[v];
      fg.bytes += part < 0 ? whole : std::min(part, whole);
    }
    for (NodeId m : fg.members) {
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

namespace kiln::passes {
namespace {

bool is_memory_bound_kernel(Op op) {
  return !op_has_trait(op, kTraitMatmul) && !op_has_trait(op, kTraitAttention) && !op_has_trait(op, kTraitSource) &&
         op != Op::reshape;
}

// A view is a contiguous window of its input when everything it cuts or reshapes lies behind leading unit axes:
// a library op can read it through a pointer offset.
bool is_contiguous_view(const Graph& g, const Node& n) {
  if (n.op == Op::reshape) return true;
  if (n.op != Op::slice && n.op != Op::split) return false;
  const Shape& in = g.value(n.inputs[0]).type.shape;
  int64_t axis = n.attrs.get_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(in.size());
  if (n.op == Op::slice && n.attrs.get_int("step", 1) != 1) return false;
  for (int64_t i = 0; i < axis; ++i) {
    if (in[i] != 1) return false;
  }
  return true;
}

// Views that need no kernel of their own (view canonicalization): every reader either is a fused group that
// does arithmetic (it loads through the view's index map), another free view, or a library op reading a
// contiguous window. Computed readers-first.
std::vector<bool> free_views(const Graph& g) {
  std::vector<std::vector<NodeId>> readers(g.values().size());
  for (NodeId id = 0; id < static_cast<NodeId>(g.nodes().size()); ++id) {
    for (ValueId v : g.node(id).inputs) readers[v].push_back(id);
  }
  std::set<ValueId> outputs;
  for (const GraphOutput& o : g.outputs()) outputs.insert(o.value);
  std::set<int32_t> computing_groups;
  for (const Node& n : g.nodes()) {
    if (n.group >= 0 && !op_has_trait(n.op, kTraitView)) computing_groups.insert(n.group);
  }
  std::vector<bool> is_free(g.nodes().size(), false);
  for (NodeId id = static_cast<NodeId>(g.nodes().size()) - 1; id >= 0; --id) {
    const Node& n = g.node(id);
    if (!op_has_trait(n.op, kTraitView) || n.op == Op::gather) continue;
    if (n.group >= 0 && computing_groups.count(n.group)) continue;  // a prologue or row member: already free
    bool ok = true;
    for (ValueId v : n.outputs) {
      ok = ok && !outputs.count(v);
      for (NodeId r : readers[v]) {
        const Node& reader = g.node(r);
        const bool loads_through = reader.group >= 0 && computing_groups.count(reader.group);
        const bool library_window =
            (op_has_trait(reader.op, kTraitMatmul) || op_has_trait(reader.op, kTraitAttention)) &&
            is_contiguous_view(g, n);
        ok = ok && (loads_through || is_free[r] || library_window);
      }
    }
    is_free[id] = ok;
  }
  return is_free;
}

}  // namespace

KernelSummary summarize_memory_bound_kernels(const Graph& original, const Graph& fused) {
  KernelSummary s;
  const std::vector<Binding> time_before = classify_binding_times(original);
  const std::vector<Binding> time_after = classify_binding_times(fused);
  // Only per-call and per-step work is launched while serving; load-time work runs once.
  auto served = [](const std::vector<Binding>& t, const Node& n) {
    return n.outputs.empty() || t[n.outputs[0]] != Binding::weight;
  };
  for (const Node& n : original.nodes()) {
    if (!is_memory_bound_kernel(n.op) || !served(time_before, n)) continue;
    ++s.kernels_before;
    s.bytes_before += node_cost(original, static_cast<NodeId>(&n - original.nodes().data())).bytes;
  }
  const std::vector<bool> free = free_views(fused);
  for (const FusedGroup& g : collect_fused_groups(fused)) {
    bool counts = false;
    for (NodeId m : g.members) {
      counts = counts ||
               (is_memory_bound_kernel(fused.node(m).op) && !free[m] && served(time_after, fused.node(m)));
    }
    if (!counts) continue;
    ++s.kernels_after;
    s.bytes_after += g.bytes;
  }
  for (NodeId id = 0; id < static_cast<NodeId>(fused.nodes().size()); ++id) {
    const Node& n = fused.node(id);
    if (n.group >= 0 || free[id] || !is_memory_bound_kernel(n.op) || !served(time_after, n)) continue;
    ++s.kernels_after;
    s.bytes_after += node_cost(fused, id).bytes;
    if (op_has_trait(n.op, kTraitView)) {
      ++s.view_copies_after;
      s.view_copy_bytes_after += node_cost(fused, id).bytes;
    }
  }
  return s;
}

}  // namespace kiln::passes
